package dev.paceline.spark;

import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import paceline.v1.JobOuterClass;
import paceline.v1.Types;

/**
 * Cluster mode: {@code paceline-spark-submit --deploy-mode cluster} runs the
 * driver itself as a Paceline job (Peloton's controller task). The job is a
 * batch job of one instance marked {@code controller}, so its pool's
 * {@code controller_limit_percent} keeps drivers from filling the pool; its
 * task runs Spark's own spark-submit in client mode on the driver's host, so
 * from there on everything is as in client mode: the driver creates and
 * owns its executor job (with its owner lease), and the application ends
 * with the driver. The submitter then waits for the driver job to end
 * ({@code spark.paceline.submit.waitAppCompletion}) and exits 0 only when it
 * SUCCEEDED. {@code --kill JOB} and {@code --status JOB} act on a driver job.
 *
 * <p>The driver needs a Paceline token of its own when the server requires
 * one: a secret of the pool ({@code spark.paceline.driver.tokenSecret}),
 * delivered as a file in the run's secrets directory. The submitter's own
 * token never goes into the job.
 */
public final class ClusterSubmit {
  /** The file name the driver's token secret is delivered under. */
  static final String TOKEN_FILE = "paceline-token";
  /** Settings that stay with the submitter (its connection and token). */
  private static final Set<String> NOT_FORWARDED = Set.of(
      "spark.master", "spark.submit.deployMode", "spark.paceline.token", "spark.paceline.tokenFile", "spark.jars");
  private static final long POLL_MS = 1000;

  private ClusterSubmit() {}

  public static void main(String[] argv) {
    int code;
    try {
      code = run(argv, System.getenv(), System.out);
    } catch (IllegalArgumentException e) {
      System.err.println("paceline-spark-submit: " + e.getMessage());
      code = 2;
    }
    System.exit(code);
  }

  static int run(String[] argv, Map<String, String> env, PrintStream out) {
    SubmitArgs a = SubmitArgs.parse(argv);
    if (a.master == null) {
      throw new IllegalArgumentException("--master: give the Paceline API as paceline://HOST:PORT");
    }
    PacelineSettings settings = PacelineSettings.from(a.conf, a.master, env);
    try (PacelineApi api = new PacelineApi(settings)) {
      if (a.kill != null) {
        api.jobs().killJob(JobOuterClass.KillJobRequest.newBuilder().setId(a.kill).build());
        out.println(a.kill + ": killing (the driver stops its executors as it exits)");
        return 0;
      }
      if (a.status != null) {
        out.println(describe(getJob(api, a.status)));
        return 0;
      }
      String jar = firstNonBlank(a.conf.get("spark.paceline.driver.jar"), env.get("PACELINE_SPARK_JAR"));
      if (jar == null) {
        throw new IllegalArgumentException("spark.paceline.driver.jar: not set and PACELINE_SPARK_JAR is unset");
      }
      JobOuterClass.JobSpec spec = driverSpec(a, settings, env, jar);
      String id = api.jobs().createJob(JobOuterClass.CreateJobRequest.newBuilder().setSpec(spec).build()).getId();
      out.println("paceline-spark-submit: driver job " + id + " created in " + settings.pool
          + "; its log: `paceline task logs " + id + " 0` (--stderr for Spark's); stop it: `paceline job kill " + id + "`");
      if (!PacelineSettings.bool(a.conf, "spark.paceline.submit.waitAppCompletion", true)) {
        return 0;
      }
      return waitFor(api, id, out);
    } catch (StatusRuntimeException e) {
      System.err.println("paceline-spark-submit: " + e.getStatus().getCode()
          + (e.getStatus().getDescription() == null ? "" : ": " + e.getStatus().getDescription()));
      return 1;
    } catch (IOException e) {
      System.err.println("paceline-spark-submit: cannot connect to " + settings.target + ": " + e.getMessage());
      return 1;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return 130;
    }
  }

  /** The driver job: one batch instance running spark-submit in client mode. */
  static JobOuterClass.JobSpec driverSpec(SubmitArgs a, PacelineSettings s, Map<String, String> env, String jar) {
    if (a.resource == null) {
      throw new IllegalArgumentException("no application: give the .py or .jar file to run after the options");
    }
    Map<String, String> conf = a.conf;
    String secret = PacelineSettings.blankToNull(conf.get("spark.paceline.driver.tokenSecret"));
    if (secret == null && s.token() != null) {
      throw new IllegalArgumentException("spark.paceline.driver.tokenSecret: the server takes tokens and the driver runs in"
          + " the cluster, so it needs one of its own: keep it as a secret of " + s.pool + " (`paceline secret put --pool "
          + s.pool + " NAME --from-file TOKEN_FILE`) and name the secret here");
    }
    int cores = PacelineSettings.integer(conf, "spark.driver.cores", 1, 1, 4096);
    double request = PacelineSettings.decimal(conf, "spark.paceline.driver.request.cores", cores);
    if (!(request > 0)) {
      throw new IllegalArgumentException("spark.paceline.driver.request.cores: must be more than 0");
    }
    long heap = PacelineSettings.sizeMiB(conf, "spark.driver.memory", "1g");
    long overhead;
    if (conf.containsKey("spark.driver.memoryOverhead")) {
      overhead = PacelineSettings.sizeMiB(conf, "spark.driver.memoryOverhead", "0");
    } else {
      double factor = PacelineSettings.decimal(conf, "spark.driver.memoryOverheadFactor", 0.10);
      overhead = Math.max(PacelineSettings.sizeMiB(conf, "spark.driver.minMemoryOverhead", "384m"), (long) (heap * factor));
    }
    long disk = PacelineSettings.sizeMiB(conf, "spark.paceline.driver.disk", "1g");
    int grace = PacelineSettings.integer(conf, "spark.paceline.driver.killGracePeriodSeconds", 30, 0, 3600);

    Map<String, String> taskEnv = new TreeMap<>();
    for (Map.Entry<String, String> e : conf.entrySet()) {
      if (e.getKey().startsWith("spark.paceline.driverEnv.")) {
        String name = e.getKey().substring("spark.paceline.driverEnv.".length());
        if (name.startsWith("PACELINE_")) {
          throw new IllegalArgumentException(e.getKey() + ": PACELINE_* variables are set by Paceline");
        }
        taskEnv.put(name, e.getValue());
      }
    }
    taskEnv.put("SPARK_HOME", s.sparkHome);
    taskEnv.put("JAVA_HOME", s.javaHome);

    Types.TaskSpec.Builder task = Types.TaskSpec.newBuilder()
        .setCommand("sh")
        .addArgs("-c")
        .addArgs(script(a, s, jar, secret != null))
        .putAllEnv(taskEnv)
        .setResources(Types.Resources.newBuilder()
            .setCpuMillis(Math.max(1, Math.round(request * 1000)))
            .setMemoryMib(heap + overhead)
            .setDiskMib(disk))
        // The application failed: running it again is the user's call, as with spark-submit.
        .setRestartPolicy(Types.RestartPolicy.newBuilder().setOnFailure(false))
        .setKillGracePeriodSecs(grace);
    if (secret != null) {
      task.addSecrets(Types.SecretRef.newBuilder().setName(secret).setFile(TOKEN_FILE));
    }
    String app = conf.getOrDefault("spark.app.name", appName(a.resource));
    return JobOuterClass.JobSpec.newBuilder()
        .setName(conf.getOrDefault("spark.paceline.driver.job.name", "spark-driver-" + PacelineSettings.slug(app)))
        .setPool(s.pool)
        .setKind(JobOuterClass.JobKind.JOB_KIND_BATCH)
        .setInstanceCount(1)
        .setSla(JobOuterClass.Sla.newBuilder().setPriority(s.priority))
        .setDefaultTask(task)
        .setController(true)
        .setDescription("Spark driver of " + app + " (cluster mode)")
        .build();
  }

  /**
   * The driver task's command: Spark's spark-submit in client mode with the
   * user's options, minus the submitter's own connection settings, plus the
   * cluster manager's jar and, with a token secret, its file.
   */
  static String script(SubmitArgs a, PacelineSettings s, String jar, boolean tokenSecret) {
    String jars = jar;
    String userJars = firstNonBlank(a.option("--jars"), a.conf.get("spark.jars"));
    if (userJars != null) {
      jars = userJars + "," + jar;
    }
    StringBuilder b = new StringBuilder("exec \"$SPARK_HOME/bin/spark-submit\" --master ");
    b.append(ExecutorCommand.quote("local-paceline://" + s.target)).append(" --deploy-mode client --jars ").append(ExecutorCommand.quote(jars));
    for (String[] o : a.options) {
      String opt = o[0];
      if (opt.equals("--master") || opt.equals("--deploy-mode") || opt.equals("--jars")) {
        continue;
      }
      if ((opt.equals("--conf") || opt.equals("-c")) && NOT_FORWARDED.contains(o[1].substring(0, o[1].indexOf('=')))) {
        continue;
      }
      b.append(' ').append(ExecutorCommand.quote(opt));
      if (o.length == 2) {
        b.append(' ').append(ExecutorCommand.quote(o[1]));
      }
    }
    if (tokenSecret) {
      // Expanded on the driver's host: the run's own secrets directory.
      b.append(" --conf \"spark.paceline.tokenFile=$PACELINE_SECRETS_DIR/" + TOKEN_FILE + "\"");
    }
    b.append(' ').append(ExecutorCommand.quote(resourcePath(a.resource)));
    for (String arg : a.appArgs) {
      b.append(' ').append(ExecutorCommand.quote(arg));
    }
    return b.toString();
  }

  /** Waits for the driver job to end, printing its state as it changes; 0 only when it SUCCEEDED. */
  private static int waitFor(PacelineApi api, String id, PrintStream out) throws InterruptedException {
    String last = "";
    String lastWhy = "";
    while (true) {
      JobOuterClass.Job job;
      try {
        job = getJob(api, id);
      } catch (StatusRuntimeException e) {
        // A leader change or a moment unreachable: the job is not lost; try again.
        System.err.println("paceline-spark-submit: " + e.getStatus().getCode() + " while reading " + id + "; retrying");
        Thread.sleep(POLL_MS);
        continue;
      }
      String state = job.getStatus().getState().name().replace("JOB_STATE_", "");
      if (!state.equals(last)) {
        out.println("paceline-spark-submit: driver job " + id + " " + state);
        last = state;
      }
      // Why it waits (a full pool, the controller limit), each time that changes.
      String why = job.getStatus().getPendingSummary();
      if (state.equals("PENDING") && !why.isEmpty() && !why.equals(lastWhy)) {
        out.println("paceline-spark-submit: driver job " + id + " waits: " + why);
      }
      lastWhy = why;
      switch (job.getStatus().getState()) {
        case JOB_STATE_SUCCEEDED -> {
          return 0;
        }
        case JOB_STATE_FAILED, JOB_STATE_KILLED -> {
          out.println(describe(job));
          return 1;
        }
        default -> Thread.sleep(POLL_MS);
      }
    }
  }

  private static JobOuterClass.Job getJob(PacelineApi api, String id) {
    return api.jobs().getJob(JobOuterClass.GetJobRequest.newBuilder().setId(id).build()).getJob();
  }

  private static String describe(JobOuterClass.Job job) {
    JobOuterClass.JobStatus st = job.getStatus();
    String message = st.getMessage().isEmpty() ? "" : " (" + st.getMessage() + ")";
    return job.getId() + ": " + st.getState().name().replace("JOB_STATE_", "") + message
        + "; the driver's log: `paceline task logs " + job.getId() + " 0 --stderr`";
  }

  /**
   * The application as the driver's host should find it: a relative path
   * that names a file here is made absolute (the driver runs in its own
   * sandbox directory); URLs and absolute paths are kept.
   */
  static String resourcePath(String resource) {
    if (resource.contains("://") || resource.equals("spark-internal") || resource.startsWith("/")) {
      return resource;
    }
    Path p = Path.of(resource);
    return java.nio.file.Files.exists(p) ? p.toAbsolutePath().normalize().toString() : resource;
  }

  /** The application's name when none is set: its file name without the extension. */
  static String appName(String resource) {
    String file = Path.of(resource).getFileName().toString();
    int dot = file.lastIndexOf('.');
    return dot > 0 ? file.substring(0, dot) : file;
  }

  private static String firstNonBlank(String... values) {
    for (String v : values) {
      if (v != null && !v.isBlank()) {
        return v;
      }
    }
    return null;
  }
}
