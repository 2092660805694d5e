package dev.paceline.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.util.concurrent.TimeUnit;
import paceline.v1.HostServiceGrpc;
import paceline.v1.JobServiceGrpc;
import paceline.v1.PluginServiceGrpc;
import paceline.v1.PoolServiceGrpc;
import paceline.v1.TaskServiceGrpc;
import paceline.v1.WatchServiceGrpc;

/**
 * Paceline's Java client: blocking stubs of every {@code paceline.v1} service
 * over one channel, with an optional bearer token and a cluster's own
 * certificate authority. The stubs and messages are generated from
 * {@code proto/paceline/v1} at build time; every message, field and RPC is
 * documented in those .proto files.
 */
public final class Paceline implements AutoCloseable {
  /** Where {@code paceline dev} listens. */
  public static final String DEFAULT_SERVER = "http://127.0.0.1:7400";

  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final ManagedChannel managed;
  public final JobServiceGrpc.JobServiceBlockingStub jobs;
  public final TaskServiceGrpc.TaskServiceBlockingStub tasks;
  public final PoolServiceGrpc.PoolServiceBlockingStub pools;
  public final HostServiceGrpc.HostServiceBlockingStub hosts;
  public final PluginServiceGrpc.PluginServiceBlockingStub plugins;
  public final WatchServiceGrpc.WatchServiceBlockingStub watch;

  private Paceline(ManagedChannel managed, Channel channel) {
    this.managed = managed;
    this.jobs = JobServiceGrpc.newBlockingStub(channel);
    this.tasks = TaskServiceGrpc.newBlockingStub(channel);
    this.pools = PoolServiceGrpc.newBlockingStub(channel);
    this.hosts = HostServiceGrpc.newBlockingStub(channel);
    this.plugins = PluginServiceGrpc.newBlockingStub(channel);
    this.watch = WatchServiceGrpc.newBlockingStub(channel);
  }

  /** Connects with PACELINE_SERVER, PACELINE_TOKEN and PACELINE_CA_CERT. */
  public static Paceline connect() throws IOException {
    return connect(System.getenv("PACELINE_SERVER"), System.getenv("PACELINE_TOKEN"), System.getenv("PACELINE_CA_CERT"));
  }

  /**
   * Connects to a server.
   *
   * @param server {@code http://host:port}, {@code https://host:port} or {@code host:port}
   *     (plain); null or empty: {@link #DEFAULT_SERVER}. A comma-separated list uses its first.
   * @param token bearer token for a server with a tokens file; null or empty: none
   * @param caCert PEM file of the authority that signed an https server's certificate
   */
  public static Paceline connect(String server, String token, String caCert) throws IOException {
    String s = (server == null || server.isBlank()) ? DEFAULT_SERVER : server.split(",")[0].trim();
    ChannelCredentials credentials;
    String target;
    if (s.startsWith("https://")) {
      if (caCert == null || caCert.isBlank()) {
        throw new IllegalArgumentException(s + " is https: give the authority's certificate (PACELINE_CA_CERT)");
      }
      credentials = TlsChannelCredentials.newBuilder().trustManager(new File(caCert)).build();
      target = s.substring("https://".length());
    } else {
      credentials = InsecureChannelCredentials.create();
      target = s.startsWith("http://") ? s.substring("http://".length()) : s;
    }
    ManagedChannel managed = Grpc.newChannelBuilder(target, credentials).build();
    Channel channel = managed;
    if (token != null && !token.isBlank()) {
      channel = ClientInterceptors.intercept(managed, bearer(token.trim()));
    }
    return new Paceline(managed, channel);
  }

  private static ClientInterceptor bearer(String token) {
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
          @Override
          public void start(Listener<R> listener, Metadata headers) {
            headers.put(AUTHORIZATION, "Bearer " + token);
            super.start(listener, headers);
          }
        };
      }
    };
  }

  @Override
  public void close() throws InterruptedException {
    managed.shutdown().awaitTermination(5, TimeUnit.SECONDS);
  }
}
