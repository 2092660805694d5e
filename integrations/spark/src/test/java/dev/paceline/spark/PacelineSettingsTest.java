package dev.paceline.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class PacelineSettingsTest {
  private static final Map<String, String> ENV = Map.of("SPARK_HOME", "/opt/spark", "JAVA_HOME", "/opt/java");

  private static PacelineSettings of(Map<String, String> conf) {
    return PacelineSettings.from(conf, "paceline://127.0.0.1:7400", ENV);
  }

  @Test
  void executorAsksFollowSparksOwnSettings() {
    Map<String, String> conf = new HashMap<>();
    conf.put("spark.app.name", "Word Count!");
    conf.put("spark.executor.cores", "2");
    conf.put("spark.executor.memory", "2g");
    PacelineSettings s = of(conf);
    assertEquals("127.0.0.1:7400", s.target);
    assertEquals("/default", s.pool);
    assertEquals("spark-word-count", s.jobName);
    assertEquals(2000, s.cpuMillis);
    // 2048 heap + max(384, 10%) overhead.
    assertEquals(2048, s.heapMiB);
    assertEquals(2048 + 384, s.memoryMiB);
    assertEquals(1024, s.diskMiB);
    assertEquals(0, s.gpus);
    assertFalse(s.tls);
    assertNull(s.token());
    assertEquals("/opt/spark", s.executorEnv.get("SPARK_HOME"));
  }

  @Test
  void theOwnerLeaseDefaultsToAMinuteMayBeTurnedOffAndMustOutlastThreePolls() {
    assertEquals(60, of(new HashMap<>()).ownerLeaseSecs);
    assertEquals(0, of(new HashMap<>(Map.of("spark.paceline.ownerLeaseSeconds", "0"))).ownerLeaseSecs);
    Map<String, String> tooShort = new HashMap<>(Map.of(
        "spark.paceline.ownerLeaseSeconds", "2", "spark.paceline.pollIntervalMs", "1000"));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> of(tooShort));
    assertTrue(e.getMessage().startsWith("spark.paceline.ownerLeaseSeconds"), e.getMessage());
  }

  @Test
  void withDecommissioningExecutorsAreStoppedWithItsSignal() {
    assertEquals("", of(new HashMap<>()).stopSignal);
    assertEquals("SIGPWR", of(new HashMap<>(Map.of("spark.decommission.enabled", "true"))).stopSignal);
    assertEquals("SIGUSR2", of(new HashMap<>(Map.of(
        "spark.decommission.enabled", "true", "spark.executor.decommission.signal", "usr2"))).stopSignal);
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> of(new HashMap<>(Map.of(
        "spark.decommission.enabled", "true", "spark.executor.decommission.signal", "KILL"))));
    assertTrue(e.getMessage().startsWith("spark.executor.decommission.signal"), e.getMessage());
  }

  @Test
  void overridesAndExtrasAreHonoured() {
    Map<String, String> conf = new HashMap<>();
    conf.put("spark.executor.memory", "8g");
    conf.put("spark.executor.memoryOverhead", "1g");
    conf.put("spark.executor.pyspark.memory", "512m");
    conf.put("spark.paceline.executor.request.cores", "0.25");
    conf.put("spark.executor.resource.gpu.amount", "1");
    conf.put("spark.paceline.pool", "/team/spark");
    conf.put("spark.executorEnv.FOO", "bar");
    PacelineSettings s = of(conf);
    assertEquals(250, s.cpuMillis);
    assertEquals(8192 + 1024 + 512, s.memoryMiB);
    assertEquals(1, s.gpus);
    assertEquals("/team/spark", s.pool);
    assertEquals("bar", s.executorEnv.get("FOO"));
    // Ten percent of 8 GiB is more than the 384 MiB floor.
    conf.remove("spark.executor.memoryOverhead");
    assertEquals(8192 + 819 + 512, of(conf).memoryMiB);
  }

  @Test
  void theTokenComesFromTheSettingAFileOrTheEnvironmentAndIsNeverShown(@TempDir Path dir) throws Exception {
    Map<String, String> conf = new HashMap<>();
    conf.put("spark.paceline.token", "s3cret-token");
    PacelineSettings s = of(conf);
    assertEquals("s3cret-token", s.token());
    assertFalse(s.toString().contains("s3cret"), s.toString());
    assertTrue(s.toString().contains("<redacted>"));

    Path file = dir.resolve("token");
    Files.writeString(file, "from-file\n");
    Map<String, String> fromFile = Map.of("spark.paceline.tokenFile", file.toString());
    assertEquals("from-file", of(fromFile).token());

    Map<String, String> both = Map.of("spark.paceline.tokenFile", file.toString(), "spark.paceline.token", "x");
    assertThrows(IllegalArgumentException.class, () -> of(both));

    Map<String, String> env = new HashMap<>(ENV);
    env.put("PACELINE_TOKEN", "from-env");
    assertEquals("from-env", PacelineSettings.from(Map.of(), "paceline://h:1", env).token());

    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> of(Map.of("spark.paceline.tokenFile", dir.resolve("missing").toString())));
    assertTrue(e.getMessage().startsWith("spark.paceline.tokenFile"), e.getMessage());
  }

  @Test
  void aCaCertTurnsTlsOn() {
    PacelineSettings s = of(Map.of("spark.paceline.tls.caCertFile", "/etc/paceline/ca.pem"));
    assertTrue(s.tls);
    assertEquals("/etc/paceline/ca.pem", s.caCertFile);
    assertTrue(of(Map.of("spark.paceline.tls.enabled", "true")).tls);
  }

  @Test
  void masterUrlsAreParsedAndBadOnesNamed() {
    assertTrue(PacelineSettings.handles("paceline://h:1"));
    assertTrue(PacelineSettings.handles("local-paceline://h:1"));
    assertFalse(PacelineSettings.handles("local[*]"));
    assertFalse(PacelineSettings.handles("k8s://h:1"));
    assertEquals("h.example:7400", PacelineSettings.target("local-paceline://h.example:7400/"));
    for (String bad : new String[] {"paceline://", "paceline://host", "paceline://host:x", "paceline://h:99999", "paceline://h:1/p"}) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PacelineSettings.target(bad), bad);
      assertTrue(e.getMessage().startsWith("master"), e.getMessage());
    }
  }

  @Test
  void badValuesNameTheirSetting() {
    String[][] cases = {
      {"spark.executor.memory", "lots"},
      {"spark.executor.cores", "0"},
      {"spark.paceline.executor.request.cores", "0"},
      {"spark.paceline.executor.preemptible", "yes"},
      {"spark.paceline.pool", "team"},
      {"spark.executorEnv.PACELINE_TASK_ID", "x"},
    };
    for (String[] c : cases) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> of(Map.of(c[0], c[1])), c[0]);
      assertTrue(e.getMessage().startsWith(c[0]), e.getMessage());
    }
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> PacelineSettings.from(Map.of(), "paceline://h:1", Map.of()));
    assertTrue(e.getMessage().startsWith("spark.paceline.executor.sparkHome"), e.getMessage());
  }

  @Test
  void sizesReadAsSparkWritesThem() {
    assertEquals(512, PacelineSettings.sizeMiB(Map.of("k", "512m"), "k", "0"));
    assertEquals(512, PacelineSettings.sizeMiB(Map.of("k", "512"), "k", "0"));
    assertEquals(3072, PacelineSettings.sizeMiB(Map.of("k", "3G"), "k", "0"));
    assertEquals(1, PacelineSettings.sizeMiB(Map.of("k", "100k"), "k", "0"));
    assertEquals("spark-app", "spark-" + PacelineSettings.slug("!!!"));
  }
}
