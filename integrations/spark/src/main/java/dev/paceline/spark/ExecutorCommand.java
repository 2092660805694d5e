package dev.paceline.spark;

import java.util.ArrayList;
import java.util.List;

/**
 * The program each executor instance runs: Spark's own
 * {@code CoarseGrainedExecutorBackend} in a JVM started from the host's
 * {@code $JAVA_HOME} with {@code $SPARK_HOME/jars} on its class path. It goes
 * through {@code sh -c} because two things are known only on the host: the
 * instance number (the last part of {@code PACELINE_TASK_ID}, which is the
 * Spark executor id) and, unless configured, the host's name.
 */
final class ExecutorCommand {
  private ExecutorCommand() {}

  /**
   * The {@code sh -c} script.
   *
   * @param s the settings
   * @param driverUrl the driver endpoint's URL ({@code spark://CoarseGrainedScheduler@host:port})
   * @param appId the application id
   * @param moduleOptions the JVM options Spark needs on Java 17 ({@code --add-opens …})
   */
  static String script(PacelineSettings s, String driverUrl, String appId, String moduleOptions) {
    List<String> jvm = new ArrayList<>();
    String cp = "$SPARK_HOME/conf:$SPARK_HOME/jars/*";
    if (!s.extraClassPath.isBlank()) {
      cp = s.extraClassPath + ":" + cp;
    }
    jvm.add("-cp");
    jvm.add(quoteExpanding(cp));
    jvm.add(quote("-Xms" + s.heapMiB + "m"));
    jvm.add(quote("-Xmx" + s.heapMiB + "m"));
    if (!s.extraLibraryPath.isBlank()) {
      jvm.add(quote("-Djava.library.path=" + s.extraLibraryPath));
    }
    for (String opt : split(moduleOptions)) {
      jvm.add(quote(opt));
    }
    for (String opt : split(s.extraJavaOptions)) {
      jvm.add(quote(opt));
    }
    String host = s.executorHostname != null ? quote(s.executorHostname) : "\"$(hostname)\"";
    StringBuilder b = new StringBuilder();
    // The instance number is the executor id: numeric, as Spark's own managers use.
    b.append("id=\"${PACELINE_TASK_ID##*-}\"; ");
    b.append("exec \"$JAVA_HOME/bin/java\" ");
    b.append(String.join(" ", jvm));
    b.append(" org.apache.spark.executor.CoarseGrainedExecutorBackend");
    b.append(" --driver-url ").append(quote(driverUrl));
    b.append(" --executor-id \"$id\"");
    b.append(" --hostname ").append(host);
    b.append(" --cores ").append(s.executorCores);
    b.append(" --app-id ").append(quote(appId));
    b.append(" --resourceProfileId 0");
    return b.toString();
  }

  /** Single-quoted for sh: nothing inside is expanded. */
  static String quote(String s) {
    return "'" + s.replace("'", "'\\''") + "'";
  }

  /** Double-quoted for sh, for the one value meant to expand $SPARK_HOME. */
  private static String quoteExpanding(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("`", "\\`") + "\"";
  }

  /** Splits JVM options on white space, honouring single and double quotes. */
  static List<String> split(String options) {
    List<String> out = new ArrayList<>();
    if (options == null) {
      return out;
    }
    StringBuilder cur = new StringBuilder();
    char q = 0;
    boolean any = false;
    for (char c : options.toCharArray()) {
      if (q != 0) {
        if (c == q) {
          q = 0;
        } else {
          cur.append(c);
        }
      } else if (c == '\'' || c == '"') {
        q = c;
        any = true;
      } else if (Character.isWhitespace(c)) {
        if (cur.length() > 0 || any) {
          out.add(cur.toString());
          cur.setLength(0);
          any = false;
        }
      } else {
        cur.append(c);
      }
    }
    if (q != 0) {
      throw new IllegalArgumentException("spark.executor.extraJavaOptions: unbalanced quote in `" + options + "`");
    }
    if (cur.length() > 0 || any) {
      out.add(cur.toString());
    }
    return out;
  }
}
