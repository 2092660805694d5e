package dev.paceline.spark;

import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkContext;
import org.apache.spark.launcher.JavaModuleOptions;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.rpc.RpcAddress;
import org.apache.spark.rpc.RpcEndpointAddress;
import org.apache.spark.scheduler.ExecutorLossReason;
import org.apache.spark.scheduler.ExecutorProcessLost;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;
import org.apache.spark.scheduler.cluster.SchedulerBackendUtils$;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import paceline.v1.JobOuterClass;
import paceline.v1.Types;
import scala.Option;
import scala.concurrent.Future;
import scala.concurrent.Promise;
import scala.concurrent.Promise$;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's coarse-grained scheduler backend with Paceline as the cluster:
 * every executor is one instance of a single stateless Paceline job (created
 * when the first executor is wanted, killed when the application stops), and
 * the Spark executor id is the instance number.
 *
 * <ul>
 *   <li>Spark's total executor target ({@link #doRequestTotalExecutors}) is
 *       met by growing the job ({@code AddInstances}); a lower target drops
 *       instances that have not registered yet, newest first.
 *   <li>Executors Spark kills ({@link #doKillExecutors}) are removed for
 *       good ({@code RemoveInstances}).
 *   <li>An executor whose task ends without being asked (failed, host lost,
 *       preempted, killed by someone) is reported to Spark with Paceline's
 *       reason, removed from the job so Paceline does not restart it under
 *       the same executor id, and replaced while Spark still wants it. When
 *       the executor's connection drops first, the executor is disabled and
 *       its reason waited for (as Spark's Kubernetes backend does), up to
 *       {@code spark.paceline.executor.lossReasonTimeoutMs}.
 * </ul>
 *
 * <p>All Paceline calls and all of this class's bookkeeping run on one
 * thread ({@code worker}), so none of it needs a lock and no Paceline call
 * is made while Spark holds its scheduler lock.
 */
public final class PacelineSchedulerBackend extends CoarseGrainedSchedulerBackend {
  private static final Logger LOG = LoggerFactory.getLogger(PacelineSchedulerBackend.class);
  private static final long PENDING_LOG_EVERY_MS = 30_000;

  private final SparkContext sc;
  private final PacelineSettings settings;
  private final ScheduledExecutorService worker;
  private final Map<String, Long> awaitingReason = new ConcurrentHashMap<>();
  private volatile boolean stopped;

  // Owned by the worker thread.
  private PacelineApi api;
  private String jobId;
  private int target;
  private final TreeMap<Integer, Instance> instances = new TreeMap<>();
  private long lastPendingLog;
  /** Executors whose process failed (not killed, preempted or lost with a host). */
  private int failures;
  /** Set once too many executors failed: nothing more is asked for. */
  private boolean givenUp;
  /** When the executor job's owner lease was last renewed. */
  private long lastRenewal;
  /** The server does not know owner leases (older than this integration). */
  private boolean leaseUnsupported;

  /** What this backend knows of one instance. */
  private static final class Instance {
    final int id;
    /** Spark asked for it to go (kill or a lower target). */
    boolean removedByUs;
    /** Its run ended or is ending; never counted again. */
    boolean gone;
    long firstRun;
    String state = "";
    String host = "";
    ExecutorLossReason reason;

    Instance(int id) {
      this.id = id;
    }
  }

  public PacelineSchedulerBackend(TaskSchedulerImpl scheduler, SparkContext sc, PacelineSettings settings) {
    super(scheduler, sc.env().rpcEnv());
    this.sc = sc;
    this.settings = settings;
    this.worker = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "paceline-executor-allocator");
      t.setDaemon(true);
      return t;
    });
  }

  @Override
  public void start() {
    super.start();
    LOG.info("Paceline: {}", settings);
    try {
      api = new PacelineApi(settings);
    } catch (IOException | RuntimeException e) {
      throw new IllegalStateException("Paceline: cannot connect to " + settings.target + ": " + e.getMessage(), e);
    }
    int initial = SchedulerBackendUtils$.MODULE$.getInitialTargetExecutorNumber(conf(), 2);
    // The first executors are asked for here so a bad pool or token fails
    // the SparkContext at once, with the server's message.
    try {
      worker.submit(() -> {
        target = initial;
        reconcile();
        return null;
      }).get();
    } catch (java.util.concurrent.ExecutionException e) {
      Throwable cause = e.getCause() != null ? e.getCause() : e;
      throw new IllegalStateException("Paceline: " + describe(cause), cause);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("Paceline: interrupted while starting", e);
    }
    worker.scheduleWithFixedDelay(this::pollQuietly, settings.pollIntervalMs, settings.pollIntervalMs, TimeUnit.MILLISECONDS);
  }

  @Override
  public void stop() {
    stopped = true;
    try {
      super.stop();
    } finally {
      worker.shutdownNow();
      try {
        worker.awaitTermination(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      if (api != null) {
        if (jobId != null) {
          try {
            api.jobs().killJob(JobOuterClass.KillJobRequest.newBuilder().setId(jobId).build());
            LOG.info("Paceline: killed executor job {}", jobId);
          } catch (StatusRuntimeException e) {
            LOG.warn("Paceline: could not kill executor job {}: {} (kill it with `paceline job kill {}`)", jobId, describe(e), jobId);
          }
        }
        api.close();
      }
    }
  }

  /** The Paceline job that holds this application's executors; null before the first executor. */
  public String jobId() {
    return jobId;
  }

  @Override
  public Future<Object> doRequestTotalExecutors(scala.collection.immutable.Map<ResourceProfile, Object> perProfile) {
    int total = 0;
    for (Map.Entry<ResourceProfile, Object> e : CollectionConverters.asJava(perProfile).entrySet()) {
      int n = ((Number) e.getValue()).intValue();
      if (e.getKey().id() == ResourceProfile.DEFAULT_RESOURCE_PROFILE_ID()) {
        total = n;
      } else if (n > 0) {
        LOG.warn("Paceline: resource profile {} is not supported; its {} executor(s) are not requested", e.getKey().id(), n);
      }
    }
    final int wanted = total;
    return onWorker(() -> {
      target = wanted;
      reconcile();
    });
  }

  @Override
  public Future<Object> doKillExecutors(scala.collection.immutable.Seq<String> executorIds) {
    List<String> ids = new ArrayList<>(CollectionConverters.asJava(executorIds));
    return onWorker(() -> removeForSpark(ids, "executors Spark killed"));
  }

  /** Removes the instances of executors Spark let go of (on the worker). */
  private void removeForSpark(List<String> executorIds, String why) {
    List<Integer> remove = new ArrayList<>();
    for (String e : executorIds) {
      Instance rec = parse(e);
      if (rec != null && !rec.removedByUs) {
        rec.removedByUs = true;
        remove.add(rec.id);
      }
    }
    if (!remove.isEmpty() && jobId != null) {
      api.jobs().removeInstances(JobOuterClass.RemoveInstancesRequest.newBuilder().setId(jobId).addAllInstances(remove).build());
      LOG.info("Paceline: removed instances {} of {} ({})", remove, jobId, why);
    }
  }

  /**
   * Executors Spark decommissions (dynamic allocation with {@code
   * spark.decommission.enabled}, or one that got its decommission signal)
   * leave by themselves once their blocks have moved; their instances are
   * removed now, so that Paceline does not start them again when they exit.
   * Removing sends the stop signal again, which a decommissioning executor
   * already handles, and SIGKILL only after the grace period.
   */
  @Override
  public scala.collection.immutable.Seq<String> decommissionExecutors(
      scala.Tuple2<String, org.apache.spark.scheduler.ExecutorDecommissionInfo>[] executorsAndInfo,
      boolean adjustTargetNumExecutors,
      boolean triggeredByExecutor) {
    scala.collection.immutable.Seq<String> ids =
        super.decommissionExecutors(executorsAndInfo, adjustTargetNumExecutors, triggeredByExecutor);
    List<String> decommissioned = new ArrayList<>(CollectionConverters.asJava(ids));
    onWorker(() -> removeForSpark(decommissioned, "executors Spark decommissions"));
    return ids;
  }

  @Override
  public CoarseGrainedSchedulerBackend.DriverEndpoint createDriverEndpoint() {
    return new Endpoint();
  }

  /**
   * The driver endpoint, told to wait for Paceline's word on why an
   * executor's connection dropped before Spark is told it is lost.
   */
  private final class Endpoint extends CoarseGrainedSchedulerBackend.DriverEndpoint {
    @Override
    public void onDisconnected(RpcAddress address) {
      Option<String> id = addressToExecutorId().get(address);
      if (id.isDefined() && disableExecutor(id.get())) {
        awaitingReason.put(id.get(), System.currentTimeMillis());
        if (!stopped) {
          worker.execute(PacelineSchedulerBackend.this::pollQuietly);
        }
      }
    }
  }

  /** Runs {@code body} on the worker; the future says whether it worked. */
  private Future<Object> onWorker(ThrowingRunnable body) {
    Promise<Object> promise = Promise$.MODULE$.apply();
    if (stopped) {
      promise.success(Boolean.FALSE);
      return promise.future();
    }
    try {
      worker.execute(() -> {
        try {
          body.run();
          promise.success(Boolean.TRUE);
        } catch (Exception e) {
          LOG.warn("Paceline: {}", describe(e));
          promise.success(Boolean.FALSE);
        }
      });
    } catch (java.util.concurrent.RejectedExecutionException e) {
      promise.success(Boolean.FALSE);
    }
    return promise.future();
  }

  @FunctionalInterface
  private interface ThrowingRunnable {
    void run() throws Exception;
  }

  private Instance parse(String executorId) {
    try {
      return instances.get(Integer.parseInt(executorId));
    } catch (NumberFormatException e) {
      return null;
    }
  }

  /** Meets the target: grows the job, or drops instances not registered yet. */
  private void reconcile() {
    if (stopped || givenUp) {
      return;
    }
    List<Integer> wanted = new ArrayList<>();
    for (Instance i : instances.values()) {
      if (!i.removedByUs && !i.gone) {
        wanted.add(i.id);
      }
    }
    int missing = target - wanted.size();
    if (missing > 0) {
      if (jobId == null) {
        createJob(missing);
      } else {
        JobOuterClass.AddInstancesResponse r =
            api.jobs().addInstances(JobOuterClass.AddInstancesRequest.newBuilder().setId(jobId).setCount(missing).build());
        for (int i : r.getInstancesList()) {
          instances.put(i, new Instance(i));
        }
        LOG.info("Paceline: added instances {} to {} (target {})", r.getInstancesList(), jobId, target);
      }
    } else if (missing < 0) {
      Set<String> registered = new HashSet<>(CollectionConverters.asJava(getExecutorIds()));
      List<Integer> drop = new ArrayList<>();
      for (int k = wanted.size() - 1; k >= 0 && drop.size() < -missing; k--) {
        if (!registered.contains(String.valueOf(wanted.get(k)))) {
          drop.add(wanted.get(k));
        }
      }
      if (!drop.isEmpty()) {
        for (int i : drop) {
          instances.get(i).removedByUs = true;
        }
        api.jobs().removeInstances(JobOuterClass.RemoveInstancesRequest.newBuilder().setId(jobId).addAllInstances(drop).build());
        LOG.info("Paceline: removed instances {} of {} not yet registered (target {})", drop, jobId, target);
      }
    }
  }

  private void createJob(int count) {
    String appId = applicationId();
    String driverUrl = RpcEndpointAddress.apply(
            conf().get("spark.driver.host"), conf().getInt("spark.driver.port", 0), CoarseGrainedSchedulerBackend.ENDPOINT_NAME())
        .toString();
    String script = ExecutorCommand.script(settings, driverUrl, appId, JavaModuleOptions.defaultModuleOptions());
    Types.TaskSpec task = Types.TaskSpec.newBuilder()
        .setCommand("sh")
        .addArgs("-c")
        .addArgs(script)
        .putAllEnv(settings.executorEnv)
        .setResources(Types.Resources.newBuilder()
            .setCpuMillis(settings.cpuMillis)
            .setMemoryMib(settings.memoryMiB)
            .setDiskMib(settings.diskMiB)
            .setGpus(settings.gpus))
        .setKillGracePeriodSecs(settings.killGracePeriodSecs)
        // Decommissioning: a preempted or removed executor first gets the
        // signal Spark listens for, and the grace period to migrate its blocks.
        .setStopSignal(settings.stopSignal)
        .build();
    JobOuterClass.JobSpec.Builder spec = JobOuterClass.JobSpec.newBuilder()
        .setName(settings.jobName)
        .setPool(settings.pool)
        .setKind(JobOuterClass.JobKind.JOB_KIND_STATELESS)
        .setInstanceCount(count)
        .setSla(JobOuterClass.Sla.newBuilder().setPriority(settings.priority).setPreemptible(settings.preemptible))
        .setDefaultTask(task)
        .setDescription("Spark executors of " + sc.appName() + " (" + appId + ")");
    if (settings.ownerLeaseSecs > 0) {
      // Killed by Paceline if this driver dies without stopping it (renewLease).
      spec.setOwnerLeaseSecs(settings.ownerLeaseSecs);
    }
    JobOuterClass.CreateJobResponse r = api.jobs().createJob(JobOuterClass.CreateJobRequest.newBuilder().setSpec(spec).build());
    jobId = r.getId();
    lastRenewal = System.currentTimeMillis();
    for (int i = 0; i < count; i++) {
      instances.put(i, new Instance(i));
    }
    for (String w : r.getWarningsList()) {
      LOG.warn("Paceline: job {}: {}", jobId, w);
    }
    LOG.info("Paceline: executor job {} created in {} with {} instance(s); executor N's log: `paceline task logs {} N --stderr`",
        jobId, settings.pool, count, jobId);
  }

  private void pollQuietly() {
    if (stopped) {
      return;
    }
    try {
      poll();
    } catch (Exception e) {
      LOG.warn("Paceline: {}", describe(e));
    }
  }

  /**
   * Renews the executor job's owner lease every quarter of it, so that the
   * job is killed if this driver dies without stopping (SIGKILL, its host
   * lost). A job the server says has ended, or whose lease ran out (the
   * driver stalled longer than the lease), has lost its executors for
   * good: the application is stopped rather than left waiting.
   */
  private void renewLease() {
    if (jobId == null || settings.ownerLeaseSecs == 0 || leaseUnsupported || givenUp) {
      return;
    }
    long now = System.currentTimeMillis();
    if (now - lastRenewal < settings.ownerLeaseSecs * 1000L / 4) {
      return;
    }
    try {
      api.jobs().renewOwnerLease(JobOuterClass.RenewOwnerLeaseRequest.newBuilder().setId(jobId).build());
      lastRenewal = now;
    } catch (StatusRuntimeException e) {
      switch (e.getStatus().getCode()) {
        case UNIMPLEMENTED -> {
          leaseUnsupported = true;
          LOG.warn("Paceline: the server has no owner leases; if this driver dies without stopping, kill {} with"
              + " `paceline job kill {}`", jobId, jobId);
        }
        case FAILED_PRECONDITION -> {
          givenUp = true;
          LOG.error("Paceline: executor job {} is over ({}); stopping the application", jobId, describe(e));
          new Thread(() -> sc.stop(12), "paceline-stop-application").start();
        }
        // Unreachable for a moment: the next poll tries again, well within the lease.
        default -> LOG.warn("Paceline: could not renew the lease of {}: {}", jobId, describe(e));
      }
    }
  }

  /** Reads the job's tasks, reports executors lost, and meets the target again. */
  private void poll() {
    renewLease();
    if (jobId != null) {
      var tasks = api.tasks().listTasks(paceline.v1.TaskOuterClass.ListTasksRequest.newBuilder().setJobId(jobId).build());
      int pending = 0;
      for (var t : tasks.getTasksList()) {
        Instance rec = instances.get(t.getInstance());
        if (rec == null) {
          continue;
        }
        if (rec.firstRun == 0) {
          rec.firstRun = t.getRun();
        }
        rec.state = t.getState().name().replace("TASK_STATE_", "");
        if (!t.getHost().isEmpty()) {
          rec.host = t.getHost();
        }
        if (!rec.gone && !rec.removedByUs && isPendingState(rec.state)) {
          pending++;
        }
        if (!rec.gone && ended(t, rec)) {
          lost(rec, t);
        }
      }
      logPending(pending);
    }
    long now = System.currentTimeMillis();
    for (Map.Entry<String, Long> e : awaitingReason.entrySet()) {
      Instance rec = parse(e.getKey());
      if (rec != null && rec.gone && rec.reason != null) {
        awaitingReason.remove(e.getKey());
        removeExecutor(e.getKey(), rec.reason);
      } else if (now - e.getValue() >= settings.lossReasonTimeoutMs) {
        awaitingReason.remove(e.getKey());
        String why = "the executor's connection dropped and Paceline reported no end of its task within "
            + settings.lossReasonTimeoutMs + " ms" + (rec == null ? "" : " (task state " + rec.state + ")");
        if (rec != null && !rec.gone) {
          rec.gone = true;
          removeQuietly(rec);
        }
        removeExecutor(e.getKey(), new ExecutorProcessLost(why, Option.empty(), false));
      }
    }
    reconcile();
  }

  private static boolean isPendingState(String state) {
    return switch (state) {
      case "INITIALIZED", "PENDING", "READY", "PLACING", "PLACED" -> true;
      default -> false;
    };
  }

  /**
   * Whether the instance's executor is over: its run ended or was restarted,
   * or it is being stopped. With decommissioning, an executor being stopped
   * is not over yet: it got its decommission signal and is moving its blocks
   * (it tells Spark itself), so it is reported only once its run has ended;
   * telling Spark earlier would drop its blocks before they move.
   */
  private boolean ended(paceline.v1.TaskOuterClass.Task t, Instance rec) {
    if (t.getRun() > rec.firstRun && rec.firstRun > 0) {
      return true;
    }
    boolean decommissions = !settings.stopSignal.isEmpty();
    return switch (t.getState()) {
      case TASK_STATE_SUCCEEDED, TASK_STATE_FAILED, TASK_STATE_LOST, TASK_STATE_KILLED -> true;
      case TASK_STATE_KILLING, TASK_STATE_PREEMPTING -> !decommissions;
      default -> !decommissions && "KILL".equalsIgnoreCase(t.getGoal());
    };
  }

  private void lost(Instance rec, paceline.v1.TaskOuterClass.Task t) {
    rec.gone = true;
    String what = t.getRun() > rec.firstRun ? "restarted by Paceline after its run ended" : rec.state;
    StringBuilder why = new StringBuilder("Paceline task " + jobId + "/" + rec.id + " " + what);
    if (!t.getReason().isEmpty()) {
      why.append(": ").append(t.getReason());
    }
    if (!t.getMessage().isEmpty()) {
      why.append(" (").append(t.getMessage()).append(")");
    }
    if (!rec.host.isEmpty()) {
      why.append(" on ").append(rec.host);
    }
    boolean causedByApp = t.getState() == paceline.v1.TaskOuterClass.TaskState.TASK_STATE_FAILED;
    Option<String> host = t.getState() == paceline.v1.TaskOuterClass.TaskState.TASK_STATE_LOST && !rec.host.isEmpty()
        ? Option.apply(rec.host)
        : Option.empty();
    rec.reason = new ExecutorProcessLost(why.toString(), host, causedByApp);
    String id = String.valueOf(rec.id);
    if (rec.removedByUs) {
      // Spark killed it: it already knows; only a disabled executor waits for this.
      if (awaitingReason.remove(id) != null) {
        removeExecutor(id, rec.reason);
      }
      return;
    }
    LOG.warn("Paceline: executor {} lost: {}", id, why);
    if (causedByApp) {
      failures++;
      int max = maxFailures();
      if (failures >= max && !givenUp) {
        // As Spark's YARN and Kubernetes managers do: executors that keep
        // failing (a bad SPARK_HOME, too little memory) end the application
        // instead of being replaced for ever.
        givenUp = true;
        LOG.error("Paceline: {} executors failed (spark.executor.maxNumFailures is {}); stopping the application."
            + " The last: {}. Its log: `paceline task logs {} {} --stderr`", failures, max, why, jobId, rec.id);
        new Thread(() -> sc.stop(11), "paceline-stop-application").start();
      }
    }
    // Paceline would restart a stateless instance under the same executor id;
    // a fresh instance replaces it instead (reconcile).
    removeQuietly(rec);
    awaitingReason.remove(id);
    removeExecutor(id, rec.reason);
  }

  /** {@code spark.executor.maxNumFailures}, by default twice the most executors asked for, at least 3. */
  private int maxFailures() {
    String set = conf().get("spark.executor.maxNumFailures", "");
    if (!set.isBlank()) {
      try {
        return Math.max(1, Integer.parseInt(set.trim()));
      } catch (NumberFormatException e) {
        LOG.warn("Paceline: spark.executor.maxNumFailures `{}` is not a number; using the default", set);
      }
    }
    boolean dynamic = conf().getBoolean("spark.dynamicAllocation.enabled", false);
    int most = dynamic
        ? conf().getInt("spark.dynamicAllocation.maxExecutors", Integer.MAX_VALUE / 2)
        : conf().getInt("spark.executor.instances", 2);
    return Math.max(3, (int) Math.min(Integer.MAX_VALUE, 2L * most));
  }

  private void removeQuietly(Instance rec) {
    try {
      api.jobs().removeInstances(JobOuterClass.RemoveInstancesRequest.newBuilder().setId(jobId).addInstances(rec.id).build());
    } catch (StatusRuntimeException e) {
      LOG.warn("Paceline: could not remove instance {} of {}: {}", rec.id, jobId, describe(e));
    }
  }

  private void logPending(int pending) {
    long now = System.currentTimeMillis();
    if (pending == 0 || now - lastPendingLog < PENDING_LOG_EVERY_MS) {
      return;
    }
    lastPendingLog = now;
    try {
      JobOuterClass.Job job = api.jobs().getJob(JobOuterClass.GetJobRequest.newBuilder().setId(jobId).build()).getJob();
      String why = job.getStatus().getPendingSummary();
      LOG.info("Paceline: {} executor(s) waiting in {}{}", pending, settings.pool, why.isEmpty() ? "" : ": " + why);
    } catch (StatusRuntimeException e) {
      LOG.debug("Paceline: job status: {}", describe(e));
    }
  }

  private static <T extends Throwable> T causeOfType(Throwable e, Class<T> type) {
    for (Throwable c = e; c != null; c = c.getCause() == c ? null : c.getCause()) {
      if (type.isInstance(c)) {
        return type.cast(c);
      }
    }
    return null;
  }

  private String describe(Throwable e) {
    if (e instanceof StatusRuntimeException s) {
      String what = s.getStatus().getDescription() == null ? "" : ": " + s.getStatus().getDescription();
      if (s.getStatus().getCode() == io.grpc.Status.Code.UNAVAILABLE) {
        javax.net.ssl.SSLException tls = causeOfType(s, javax.net.ssl.SSLException.class);
        if (tls != null) {
          // gRPC says only "io exception"; the handshake's own words are in the causes.
          what += " (TLS handshake with " + settings.target + " failed: " + tls.getMessage() + "; "
              + (settings.caCertFile == null
                  ? "the JVM's trust store does not trust the server's certificate: set spark.paceline.tls.caCertFile to the authority that signed it"
                  : "is " + settings.caCertFile + " the authority that signed the server's certificate, and does the certificate name the host in the master URL?")
              + ")";
        } else {
          what += " (is the Paceline API at " + settings.target + (settings.tls ? ", with TLS" : ", without TLS") + "?)";
        }
      }
      return s.getStatus().getCode() + what;
    }
    return e.getMessage() == null ? e.toString() : e.getMessage();
  }
}
