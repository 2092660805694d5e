package dev.paceline.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A spark-submit command line, read as spark-submit reads it, for cluster
 * mode: the options before the application (each kept in order, to be handed
 * on to the driver's own spark-submit), the {@code --conf} settings, the
 * application (a .py file, a jar, ...) and its arguments. Plain Java over
 * strings, so it is tested without Spark.
 */
final class SubmitArgs {
  /** spark-submit's options that take no value. */
  private static final Set<String> FLAGS = Set.of("--verbose", "-v", "--supervise", "--help", "-h", "--version");
  /** Options whose value becomes a setting, as spark-submit maps them. */
  private static final Map<String, String> AS_SETTING = Map.of(
      "--name", "spark.app.name",
      "--driver-memory", "spark.driver.memory",
      "--driver-cores", "spark.driver.cores",
      "--executor-memory", "spark.executor.memory",
      "--executor-cores", "spark.executor.cores",
      "--num-executors", "spark.executor.instances",
      "--driver-java-options", "spark.driver.extraJavaOptions");

  /** Every option before the application as {flag} or {option, value}, in order. */
  final List<String[]> options = new ArrayList<>();
  /** {@code --conf} settings, and the options above as settings; later ones win. */
  final Map<String, String> conf = new LinkedHashMap<>();
  String master;
  String deployMode;
  /** {@code --kill ID} / {@code --status ID}: a driver job to act on instead of a submission. */
  String kill;
  String status;
  /** The application: a .py, .jar or .R file, or spark-internal; null when none was given. */
  String resource;
  final List<String> appArgs = new ArrayList<>();

  static SubmitArgs parse(String[] argv) {
    SubmitArgs a = new SubmitArgs();
    int i = 0;
    while (i < argv.length && argv[i].startsWith("-")) {
      String opt = argv[i];
      String value = null;
      int eq = opt.indexOf('=');
      if (opt.startsWith("--") && eq > 0) {
        value = opt.substring(eq + 1);
        opt = opt.substring(0, eq);
        i++;
      } else if (FLAGS.contains(opt)) {
        a.options.add(new String[] {opt});
        i++;
        continue;
      } else {
        if (i + 1 >= argv.length) {
          throw new IllegalArgumentException(opt + ": needs a value");
        }
        value = argv[i + 1];
        i += 2;
      }
      switch (opt) {
        case "--master" -> a.master = value;
        case "--deploy-mode" -> a.deployMode = value;
        case "--kill" -> a.kill = value;
        case "--status" -> a.status = value;
        case "--conf", "-c" -> {
          int kv = value.indexOf('=');
          if (kv <= 0) {
            throw new IllegalArgumentException("--conf " + value + ": not KEY=VALUE");
          }
          a.conf.put(value.substring(0, kv), value.substring(kv + 1));
          a.options.add(new String[] {"--conf", value});
        }
        default -> {
          if (AS_SETTING.containsKey(opt)) {
            a.conf.put(AS_SETTING.get(opt), value);
          }
          a.options.add(new String[] {opt, value});
        }
      }
    }
    if (i < argv.length) {
      a.resource = argv[i];
      for (int k = i + 1; k < argv.length; k++) {
        a.appArgs.add(argv[k]);
      }
    }
    if (a.master == null) {
      a.master = a.conf.get("spark.master");
    }
    if (a.deployMode == null) {
      a.deployMode = a.conf.getOrDefault("spark.submit.deployMode", "client");
    }
    return a;
  }

  /** The value of option {@code opt} (the last one given), or null. */
  String option(String opt) {
    String v = null;
    for (String[] o : options) {
      if (o.length == 2 && o[0].equals(opt)) {
        v = o[1];
      }
    }
    return v;
  }
}
