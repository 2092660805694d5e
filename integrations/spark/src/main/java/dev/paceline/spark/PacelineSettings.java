package dev.paceline.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * Everything the Paceline cluster manager reads from Spark's configuration,
 * checked once when the application starts, so a mistake fails the
 * SparkContext with the setting's name instead of an executor that never
 * comes. Every setting is documented in docs/spark.md. Plain Java over a
 * map of strings, so it is tested without a SparkContext.
 */
public final class PacelineSettings {
  /** Master URL schemes this manager answers: the second passes spark-submit's check. */
  public static final String SCHEME = "paceline://";
  public static final String SUBMIT_SCHEME = "local-paceline://";
  /** The signals Paceline may stop a task with (TaskSpec.stop_signal). */
  static final java.util.List<String> STOP_SIGNALS =
      java.util.List.of("SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGPWR", "SIGWINCH");

  /** {@code host:port} of the Paceline API. */
  public final String target;
  public final boolean tls;
  /** PEM file of the authority that signed the server's certificate; null: the JVM's trust store. */
  public final String caCertFile;
  /** Bearer token; null for an open API. Never logged, never in toString. */
  private final String token;
  public final String pool;
  public final String jobName;
  public final int priority;
  public final boolean preemptible;
  public final int executorCores;
  public final long cpuMillis;
  public final long heapMiB;
  public final long memoryMiB;
  public final long diskMiB;
  public final long gpus;
  public final String sparkHome;
  public final String javaHome;
  public final String executorHostname;
  public final int killGracePeriodSecs;
  public final long pollIntervalMs;
  public final long lossReasonTimeoutMs;
  /** The executor job's owner lease in seconds (0: none): the job is killed when the driver stops renewing it. */
  public final int ownerLeaseSecs;
  /**
   * The executors' stop signal: with {@code spark.decommission.enabled}, the
   * one their decommissioning listens for ({@code SIG} + {@code
   * spark.executor.decommission.signal}, SIGPWR by default), so an executor
   * that is preempted or removed decommissions before it is killed; else
   * empty (SIGTERM).
   */
  public final String stopSignal;
  /** Environment for executors: spark.executorEnv.* plus SPARK_HOME and JAVA_HOME. */
  public final Map<String, String> executorEnv;
  public final String extraJavaOptions;
  public final String extraClassPath;
  public final String extraLibraryPath;

  private PacelineSettings(Map<String, String> conf, String master, Map<String, String> env) {
    this.target = target(master);
    this.caCertFile = blankToNull(conf.get("spark.paceline.tls.caCertFile"));
    this.tls = bool(conf, "spark.paceline.tls.enabled", caCertFile != null);
    this.token = token(conf, env);
    this.pool = conf.getOrDefault("spark.paceline.pool", "/default").trim();
    if (!pool.startsWith("/")) {
      throw new IllegalArgumentException("spark.paceline.pool: `" + pool + "` is not a pool path such as /team/spark");
    }
    String app = conf.getOrDefault("spark.app.name", "app");
    this.jobName = conf.getOrDefault("spark.paceline.job.name", "spark-" + slug(app));
    this.priority = integer(conf, "spark.paceline.priority", 0, 0, Integer.MAX_VALUE);
    this.preemptible = bool(conf, "spark.paceline.executor.preemptible", false);
    this.executorCores = integer(conf, "spark.executor.cores", 1, 1, 4096);
    double requestCores = decimal(conf, "spark.paceline.executor.request.cores", executorCores);
    if (!(requestCores > 0)) {
      throw new IllegalArgumentException("spark.paceline.executor.request.cores: must be more than 0");
    }
    this.cpuMillis = Math.max(1, Math.round(requestCores * 1000));
    this.heapMiB = sizeMiB(conf, "spark.executor.memory", "1g");
    long overhead;
    if (conf.containsKey("spark.executor.memoryOverhead")) {
      overhead = sizeMiB(conf, "spark.executor.memoryOverhead", "0");
    } else {
      double factor = decimal(conf, "spark.executor.memoryOverheadFactor", 0.10);
      long floor = sizeMiB(conf, "spark.executor.minMemoryOverhead", "384m");
      overhead = Math.max(floor, (long) (heapMiB * factor));
    }
    long pyspark = conf.containsKey("spark.executor.pyspark.memory") ? sizeMiB(conf, "spark.executor.pyspark.memory", "0") : 0;
    this.memoryMiB = heapMiB + overhead + pyspark;
    this.diskMiB = sizeMiB(conf, "spark.paceline.executor.disk", "1g");
    String sparkGpus = conf.getOrDefault("spark.executor.resource.gpu.amount", "0");
    this.gpus = integer(conf, "spark.paceline.executor.gpus", integer(Map.of("gpu", sparkGpus), "gpu", 0, 0, 1024), 0, 1024);
    this.sparkHome = firstOf(conf.get("spark.paceline.executor.sparkHome"), env.get("SPARK_HOME"));
    if (sparkHome == null) {
      throw new IllegalArgumentException(
          "spark.paceline.executor.sparkHome: not set and SPARK_HOME is unset: executors need Spark's jars on their hosts");
    }
    this.javaHome = firstOf(conf.get("spark.paceline.executor.javaHome"), env.get("JAVA_HOME"), System.getProperty("java.home"));
    this.executorHostname = blankToNull(conf.get("spark.paceline.executor.hostname"));
    this.killGracePeriodSecs = integer(conf, "spark.paceline.executor.killGracePeriodSeconds", 10, 0, 3600);
    this.pollIntervalMs = integer(conf, "spark.paceline.pollIntervalMs", 1000, 100, 60_000);
    this.lossReasonTimeoutMs = integer(conf, "spark.paceline.executor.lossReasonTimeoutMs", 10_000, 0, 600_000);
    if (bool(conf, "spark.decommission.enabled", false)) {
      String sig = "SIG" + conf.getOrDefault("spark.executor.decommission.signal", "PWR").trim().toUpperCase(Locale.ROOT);
      if (!STOP_SIGNALS.contains(sig)) {
        throw new IllegalArgumentException("spark.executor.decommission.signal: Paceline stops tasks with one of "
            + String.join(", ", STOP_SIGNALS) + " (without SIG), not " + sig);
      }
      this.stopSignal = sig;
    } else {
      this.stopSignal = "";
    }
    this.ownerLeaseSecs = integer(conf, "spark.paceline.ownerLeaseSeconds", 60, 0, 86_400);
    if (ownerLeaseSecs > 0 && ownerLeaseSecs * 1000L < 3 * pollIntervalMs) {
      throw new IllegalArgumentException("spark.paceline.ownerLeaseSeconds: " + ownerLeaseSecs
          + " s is less than three polls (spark.paceline.pollIntervalMs " + pollIntervalMs + "); the driver renews the lease as it polls");
    }
    Map<String, String> e = new TreeMap<>();
    String prefix = "spark.executorEnv.";
    conf.forEach((k, v) -> {
      if (k.startsWith(prefix) && k.length() > prefix.length()) {
        e.put(k.substring(prefix.length()), v);
      }
    });
    for (String k : e.keySet()) {
      if (k.startsWith("PACELINE_")) {
        throw new IllegalArgumentException("spark.executorEnv." + k + ": PACELINE_* variables are set by Paceline");
      }
    }
    e.put("SPARK_HOME", sparkHome);
    e.put("JAVA_HOME", javaHome);
    this.executorEnv = Map.copyOf(e);
    this.extraJavaOptions = conf.getOrDefault("spark.executor.extraJavaOptions", "");
    this.extraClassPath = conf.getOrDefault("spark.executor.extraClassPath", "");
    this.extraLibraryPath = conf.getOrDefault("spark.executor.extraLibraryPath", "");
  }

  /**
   * Reads the settings.
   *
   * @param conf Spark's configuration as strings
   * @param master the master URL, {@code paceline://HOST:PORT}
   * @param env the driver's environment (SPARK_HOME, JAVA_HOME, PACELINE_TOKEN)
   * @throws IllegalArgumentException naming the setting that is wrong
   */
  public static PacelineSettings from(Map<String, String> conf, String master, Map<String, String> env) {
    return new PacelineSettings(conf, master, env);
  }

  /** Whether {@code master} is one of this manager's URLs. */
  public static boolean handles(String master) {
    return master != null && (master.startsWith(SCHEME) || master.startsWith(SUBMIT_SCHEME));
  }

  /** The bearer token, or null; for the connection only. */
  String token() {
    return token;
  }

  @Override
  public String toString() {
    // The token is left out on purpose: settings get logged.
    return "PacelineSettings{target=" + target + ", tls=" + tls + ", token=" + (token == null ? "none" : "<redacted>")
        + ", pool=" + pool + ", job=" + jobName + ", cpuMillis=" + cpuMillis + ", memoryMiB=" + memoryMiB
        + ", diskMiB=" + diskMiB + ", gpus=" + gpus + "}";
  }

  static String target(String master) {
    String rest;
    if (master != null && master.startsWith(SCHEME)) {
      rest = master.substring(SCHEME.length());
    } else if (master != null && master.startsWith(SUBMIT_SCHEME)) {
      rest = master.substring(SUBMIT_SCHEME.length());
    } else {
      throw new IllegalArgumentException("master: `" + master + "` is not paceline://HOST:PORT");
    }
    if (rest.endsWith("/")) {
      rest = rest.substring(0, rest.length() - 1);
    }
    int colon = rest.lastIndexOf(':');
    if (colon <= 0 || colon == rest.length() - 1 || rest.contains("/")) {
      throw new IllegalArgumentException("master: `" + master + "` is not paceline://HOST:PORT");
    }
    try {
      int port = Integer.parseInt(rest.substring(colon + 1));
      if (port < 1 || port > 65535) {
        throw new NumberFormatException();
      }
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("master: `" + master + "` has no valid port");
    }
    return rest;
  }

  private static String token(Map<String, String> conf, Map<String, String> env) {
    String inline = blankToNull(conf.get("spark.paceline.token"));
    String file = blankToNull(conf.get("spark.paceline.tokenFile"));
    if (inline != null && file != null) {
      throw new IllegalArgumentException("spark.paceline.token and spark.paceline.tokenFile: set one, not both");
    }
    if (file != null) {
      try {
        String t = Files.readString(Path.of(file), StandardCharsets.UTF_8).trim();
        if (t.isEmpty()) {
          throw new IllegalArgumentException("spark.paceline.tokenFile: " + file + " is empty");
        }
        return t;
      } catch (IOException e) {
        throw new IllegalArgumentException("spark.paceline.tokenFile: cannot read " + file + ": " + e.getMessage());
      }
    }
    return inline != null ? inline.trim() : blankToNull(env.get("PACELINE_TOKEN"));
  }

  /** Sizes as Spark writes them: 512m, 2g, 1024k, a bare number in MiB. */
  static long sizeMiB(Map<String, String> conf, String key, String dflt) {
    String v = conf.getOrDefault(key, dflt).trim().toLowerCase(Locale.ROOT);
    try {
      String digits = v.replaceAll("[a-z]+$", "");
      String unit = v.substring(digits.length());
      long n = Long.parseLong(digits);
      long mib;
      switch (unit) {
        case "", "m", "mb", "mi", "mib" -> mib = n;
        case "k", "kb", "ki", "kib" -> mib = (n + 1023) / 1024;
        case "g", "gb", "gi", "gib" -> mib = n * 1024;
        case "t", "tb", "ti", "tib" -> mib = n * 1024 * 1024;
        default -> throw new NumberFormatException();
      }
      if (n < 0) {
        throw new NumberFormatException();
      }
      return mib;
    } catch (RuntimeException e) {
      throw new IllegalArgumentException(key + ": `" + v + "` is not a size such as 512m or 2g");
    }
  }

  static int integer(Map<String, String> conf, String key, int dflt, int min, int max) {
    String v = conf.get(key);
    if (v == null) {
      return dflt;
    }
    try {
      int n = Integer.parseInt(v.trim());
      if (n < min || n > max) {
        throw new NumberFormatException();
      }
      return n;
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(key + ": `" + v + "` is not a whole number from " + min + " to " + max);
    }
  }

  static double decimal(Map<String, String> conf, String key, double dflt) {
    String v = conf.get(key);
    if (v == null) {
      return dflt;
    }
    try {
      double d = Double.parseDouble(v.trim());
      if (Double.isNaN(d) || Double.isInfinite(d) || d < 0) {
        throw new NumberFormatException();
      }
      return d;
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(key + ": `" + v + "` is not a number");
    }
  }

  static boolean bool(Map<String, String> conf, String key, boolean dflt) {
    String v = conf.get(key);
    if (v == null) {
      return dflt;
    }
    return switch (v.trim().toLowerCase(Locale.ROOT)) {
      case "true" -> true;
      case "false" -> false;
      default -> throw new IllegalArgumentException(key + ": `" + v + "` is not true or false");
    };
  }

  private static String firstOf(String... values) {
    for (String v : values) {
      if (blankToNull(v) != null) {
        return v.trim();
      }
    }
    return null;
  }

  static String blankToNull(String s) {
    return s == null || s.isBlank() ? null : s;
  }

  /** A job name from an application name: lower case, [a-z0-9-], at most 40 characters. */
  static String slug(String name) {
    String s = name.toLowerCase(Locale.ROOT).replaceAll("[^a-z0-9]+", "-").replaceAll("^-+|-+$", "");
    if (s.isEmpty()) {
      s = "app";
    }
    return s.length() > 40 ? s.substring(0, 40).replaceAll("-+$", "") : s;
  }
}
