package dev.paceline.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The executor's script, run by a real sh with a stand-in java that prints its arguments. */
class ExecutorCommandTest {
  @Test
  void theScriptStartsSparksExecutorWithTheInstanceAsItsId(@TempDir Path dir) throws Exception {
    Path javaHome = dir.resolve("java");
    Files.createDirectories(javaHome.resolve("bin"));
    Path java = javaHome.resolve("bin/java");
    Files.writeString(java, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n");
    Files.setPosixFilePermissions(java, PosixFilePermissions.fromString("rwxr-xr-x"));
    Map<String, String> conf = Map.of(
        "spark.executor.cores", "3",
        "spark.executor.memory", "700m",
        "spark.executor.extraJavaOptions", "-Dx='a b' -Dy=$HOME",
        "spark.paceline.executor.hostname", "exec-host");
    PacelineSettings s = PacelineSettings.from(
        conf, "paceline://127.0.0.1:7400", Map.of("SPARK_HOME", "/opt/my spark", "JAVA_HOME", javaHome.toString()));
    String script = ExecutorCommand.script(s, "spark://CoarseGrainedScheduler@10.0.0.1:4040", "app-'1'", "--add-opens=a/b=ALL");

    ProcessBuilder pb = new ProcessBuilder("sh", "-c", script);
    pb.environment().putAll(s.executorEnv);
    pb.environment().put("PACELINE_TASK_ID", "spark-e2e-1a2b3c4d-17");
    Process p = pb.start();
    List<String> args = List.of(new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).split("\n"));
    assertEquals(0, p.waitFor());
    assertEquals(List.of(
        "-cp", "/opt/my spark/conf:/opt/my spark/jars/*",
        "-Xms700m", "-Xmx700m",
        "--add-opens=a/b=ALL",
        "-Dx=a b", "-Dy=$HOME",
        "org.apache.spark.executor.CoarseGrainedExecutorBackend",
        "--driver-url", "spark://CoarseGrainedScheduler@10.0.0.1:4040",
        "--executor-id", "17",
        "--hostname", "exec-host",
        "--cores", "3",
        "--app-id", "app-'1'",
        "--resourceProfileId", "0"), args);
  }
}
