package dev.paceline.client;

import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import paceline.v1.JobOuterClass.CreateJobRequest;
import paceline.v1.JobOuterClass.GetJobRequest;
import paceline.v1.JobOuterClass.Job;
import paceline.v1.JobOuterClass.JobKind;
import paceline.v1.JobOuterClass.JobSpec;
import paceline.v1.JobOuterClass.JobState;
import paceline.v1.Types.Resources;
import paceline.v1.Types.TaskSpec;

/**
 * Submits a batch job and waits for it to finish:
 *
 * <pre>clients/java/submit [--pool /default] [--instances 3] [--cpu-millis 100] [--env K=V] NAME -- COMMAND [ARGS...]</pre>
 *
 * <p>Prints the job id, then its final state and task counts; exits 0 only if
 * the job SUCCEEDED. Server, token and CA come from PACELINE_SERVER,
 * PACELINE_TOKEN and PACELINE_CA_CERT.
 */
public final class Submit {
  private Submit() {}

  public static void main(String[] argv) throws Exception {
    String pool = "/default";
    int instances = 3;
    long cpu = 100;
    Map<String, String> env = new TreeMap<>();
    List<String> rest = new ArrayList<>();
    for (int i = 0; i < argv.length; i++) {
      switch (argv[i]) {
        case "--pool" -> pool = argv[++i];
        case "--instances" -> instances = Integer.parseInt(argv[++i]);
        case "--cpu-millis" -> cpu = Long.parseLong(argv[++i]);
        case "--env" -> {
          String[] kv = argv[++i].split("=", 2);
          env.put(kv[0], kv.length > 1 ? kv[1] : "");
        }
        case "--" -> {
          rest.addAll(Arrays.asList(argv).subList(i + 1, argv.length));
          i = argv.length;
        }
        default -> rest.add(argv[i]);
      }
    }
    if (rest.size() < 2) {
      System.err.println("usage: submit [--pool P] [--instances N] [--cpu-millis M] [--env K=V] NAME -- COMMAND [ARGS...]");
      System.exit(2);
    }
    String name = rest.get(0);
    TaskSpec task = TaskSpec.newBuilder()
        .setCommand(rest.get(1))
        .addAllArgs(rest.subList(2, rest.size()))
        .putAllEnv(env)
        .setResources(Resources.newBuilder().setCpuMillis(cpu).setMemoryMib(32).setDiskMib(10))
        .build();
    JobSpec spec = JobSpec.newBuilder()
        .setName(name).setPool(pool).setKind(JobKind.JOB_KIND_BATCH)
        .setInstanceCount(instances).setDefaultTask(task)
        .build();
    Paceline connected;
    try {
      connected = Paceline.connect();
    } catch (IllegalArgumentException | IOException e) {
      // An https server without a readable CA certificate: say so, without a stack trace.
      System.err.println("error: " + e.getMessage());
      System.exit(1);
      return;
    }
    try (Paceline client = connected) {
      String id;
      try {
        id = client.jobs.createJob(CreateJobRequest.newBuilder().setSpec(spec).build()).getId();
      } catch (StatusRuntimeException e) {
        System.err.println("error: " + e.getStatus().getCode() + ": " + e.getStatus().getDescription());
        System.exit(1);
        return;
      }
      System.out.println("job " + id);
      long deadline = System.currentTimeMillis() + 120_000;
      while (true) {
        Job job = client.jobs.getJob(GetJobRequest.newBuilder().setId(id).build()).getJob();
        JobState state = job.getStatus().getState();
        if (state == JobState.JOB_STATE_SUCCEEDED || state == JobState.JOB_STATE_FAILED || state == JobState.JOB_STATE_KILLED) {
          StringBuilder counts = new StringBuilder();
          new TreeMap<>(job.getStatus().getTaskCountsMap()).forEach((k, v) -> counts.append(' ').append(k).append('=').append(v));
          String shortState = state.name().replace("JOB_STATE_", "");
          System.out.println("state " + shortState + counts);
          System.exit(shortState.equals("SUCCEEDED") ? 0 : 1);
        }
        if (System.currentTimeMillis() > deadline) {
          System.err.println("error: job " + id + " not finished after 120 s");
          System.exit(1);
        }
        Thread.sleep(300);
      }
    }
  }
}
