package dev.paceline.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import paceline.v1.JobOuterClass;
import paceline.v1.Types;

/** Cluster mode's command line, driver job, and the driver's command run by a real sh. */
class ClusterSubmitTest {
  private static final Map<String, String> ENV = Map.of("SPARK_HOME", "/opt/spark", "JAVA_HOME", "/opt/java");

  @Test
  void theCommandLineIsReadAsSparkSubmitReadsIt() {
    SubmitArgs a = SubmitArgs.parse(new String[] {
        "--master", "paceline://h:7400", "--deploy-mode", "cluster", "--verbose", "--name", "My App",
        "--conf", "spark.driver.memory=2g", "--driver-cores=2", "--jars", "a.jar", "app.py", "--in", "x y"});
    assertEquals("paceline://h:7400", a.master);
    assertEquals("cluster", a.deployMode);
    assertEquals("My App", a.conf.get("spark.app.name"));
    assertEquals("2g", a.conf.get("spark.driver.memory"));
    assertEquals("2", a.conf.get("spark.driver.cores"));
    assertEquals("a.jar", a.option("--jars"));
    assertEquals("app.py", a.resource);
    assertEquals(List.of("--in", "x y"), a.appArgs);
    assertNull(a.kill);

    SubmitArgs k = SubmitArgs.parse(new String[] {"--master", "paceline://h:7400", "--kill", "spark-driver-x-1"});
    assertEquals("spark-driver-x-1", k.kill);
    assertNull(k.resource);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> SubmitArgs.parse(new String[] {"--conf", "novalue", "a.py"}));
    assertTrue(e.getMessage().contains("KEY=VALUE"), e.getMessage());
  }

  @Test
  void theDriverIsOneControllerBatchTaskThatIsNotRetriedAndGetsItsTokenAsASecretFile() {
    SubmitArgs a = SubmitArgs.parse(new String[] {
        "--master", "paceline://h:7400", "--deploy-mode", "cluster", "--conf", "spark.paceline.pool=/team",
        "--conf", "spark.paceline.token=submitters-token", "--conf", "spark.paceline.driver.tokenSecret=driver-token",
        "--conf", "spark.driver.memory=2g", "--conf", "spark.paceline.driver.request.cores=0.5",
        "--conf", "spark.paceline.driverEnv.PYSPARK_PYTHON=/usr/bin/python3", "/apps/etl.py"});
    PacelineSettings s = PacelineSettings.from(a.conf, a.master, ENV);
    JobOuterClass.JobSpec spec = ClusterSubmit.driverSpec(a, s, ENV, "/opt/paceline-spark.jar");
    assertEquals("spark-driver-etl", spec.getName());
    assertEquals("/team", spec.getPool());
    assertEquals(JobOuterClass.JobKind.JOB_KIND_BATCH, spec.getKind());
    assertEquals(1, spec.getInstanceCount());
    assertTrue(spec.getController());
    Types.TaskSpec t = spec.getDefaultTask();
    assertFalse(t.getRestartPolicy().getOnFailure());
    assertEquals(500, t.getResources().getCpuMillis());
    assertEquals(2048 + 384, t.getResources().getMemoryMib());
    assertEquals("/usr/bin/python3", t.getEnvMap().get("PYSPARK_PYTHON"));
    assertEquals("/opt/spark", t.getEnvMap().get("SPARK_HOME"));
    assertEquals(List.of(Types.SecretRef.newBuilder().setName("driver-token").setFile("paceline-token").build()),
        t.getSecretsList());
    assertFalse(spec.toString().contains("submitters-token"), "the submitter's token never goes into the job");
  }

  @Test
  void withATokenButNoSecretForTheDriverNothingIsSubmitted() {
    SubmitArgs a = SubmitArgs.parse(new String[] {
        "--master", "paceline://h:7400", "--deploy-mode", "cluster", "--conf", "spark.paceline.token=t", "/apps/etl.py"});
    PacelineSettings s = PacelineSettings.from(a.conf, a.master, ENV);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ClusterSubmit.driverSpec(a, s, ENV, "/j.jar"));
    assertTrue(e.getMessage().startsWith("spark.paceline.driver.tokenSecret"), e.getMessage());
  }

  @Test
  void theDriversScriptRunsSparkSubmitInClientModeWithTheUsersOptions(@TempDir Path dir) throws Exception {
    Path bin = Files.createDirectories(dir.resolve("spark/bin"));
    Path submit = bin.resolve("spark-submit");
    Files.writeString(submit, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n");
    Files.setPosixFilePermissions(submit, PosixFilePermissions.fromString("rwxr-xr-x"));
    SubmitArgs a = SubmitArgs.parse(new String[] {
        "--master", "paceline://h:7400", "--deploy-mode", "cluster", "--conf", "spark.paceline.tokenFile=/home/me/token",
        "--conf", "spark.executor.instances=3", "--jars", "/libs/x.jar", "--verbose", "/apps/it's.py", "a b", "$HOME"});
    PacelineSettings s = PacelineSettings.from(Map.of("spark.paceline.token", "t"), a.master, ENV);
    String script = ClusterSubmit.script(a, s, "/opt/paceline-spark.jar", true);

    ProcessBuilder pb = new ProcessBuilder("sh", "-c", script);
    pb.environment().put("SPARK_HOME", dir.resolve("spark").toString());
    pb.environment().put("PACELINE_SECRETS_DIR", "/run/secrets dir");
    Process p = pb.start();
    List<String> args = List.of(new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).split("\n"));
    assertEquals(0, p.waitFor());
    assertEquals(List.of(
        "--master", "local-paceline://h:7400", "--deploy-mode", "client",
        "--jars", "/libs/x.jar,/opt/paceline-spark.jar",
        "--conf", "spark.executor.instances=3",
        "--verbose",
        "--conf", "spark.paceline.tokenFile=/run/secrets dir/paceline-token",
        "/apps/it's.py", "a b", "$HOME"), args);
  }
}
