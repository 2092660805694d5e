package dev.paceline.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.ExternalClusterManager;
import org.apache.spark.scheduler.SchedulerBackend;
import org.apache.spark.scheduler.TaskScheduler;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import scala.Tuple2;

/**
 * Spark's extension point for cluster managers (found through
 * META-INF/services, as Spark's Kubernetes support is): a SparkContext whose
 * master is {@code paceline://HOST:PORT} gets Spark's own task scheduler and a
 * {@link PacelineSchedulerBackend}, which runs the executors as instances of
 * one Paceline job. {@code local-paceline://HOST:PORT} means the same and is
 * what {@code spark-submit --master} accepts (its check admits only yarn,
 * spark://, k8s:// and local masters; docs/spark.md).
 */
public final class PacelineClusterManager implements ExternalClusterManager {
  @Override
  public boolean canCreate(String masterURL) {
    return PacelineSettings.handles(masterURL);
  }

  @Override
  public TaskScheduler createTaskScheduler(SparkContext sc, String masterURL) {
    return new TaskSchedulerImpl(sc);
  }

  @Override
  public SchedulerBackend createSchedulerBackend(SparkContext sc, String masterURL, TaskScheduler scheduler) {
    Map<String, String> conf = new HashMap<>();
    for (Tuple2<String, String> kv : sc.conf().getAll()) {
      conf.put(kv._1(), kv._2());
    }
    PacelineSettings settings;
    try {
      settings = PacelineSettings.from(conf, masterURL, System.getenv());
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("Paceline: " + e.getMessage(), e);
    }
    return new PacelineSchedulerBackend((TaskSchedulerImpl) scheduler, sc, settings);
  }

  @Override
  public void initialize(TaskScheduler scheduler, SchedulerBackend backend) {
    ((TaskSchedulerImpl) scheduler).initialize(backend);
  }
}
