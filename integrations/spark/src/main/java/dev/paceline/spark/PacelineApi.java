package dev.paceline.spark;

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
import paceline.v1.JobServiceGrpc;
import paceline.v1.TaskServiceGrpc;

/**
 * One gRPC channel to the Paceline API with the bearer token (when set) on
 * every call and TLS (when configured). Calls carry a deadline so a hung
 * server cannot stall Spark's allocation thread forever.
 */
final class PacelineApi implements AutoCloseable {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final long DEADLINE_SECS = 30;

  private final ManagedChannel managed;
  private final Channel channel;

  PacelineApi(PacelineSettings s) throws IOException {
    ChannelCredentials credentials;
    if (s.tls) {
      TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
      if (s.caCertFile != null) {
        b.trustManager(new File(s.caCertFile));
      }
      credentials = b.build();
    } else {
      credentials = InsecureChannelCredentials.create();
    }
    this.managed = Grpc.newChannelBuilder(s.target, credentials).build();
    String token = s.token();
    this.channel = token == null ? managed : ClientInterceptors.intercept(managed, bearer(token));
  }

  JobServiceGrpc.JobServiceBlockingStub jobs() {
    return JobServiceGrpc.newBlockingStub(channel).withDeadlineAfter(DEADLINE_SECS, TimeUnit.SECONDS);
  }

  TaskServiceGrpc.TaskServiceBlockingStub tasks() {
    return TaskServiceGrpc.newBlockingStub(channel).withDeadlineAfter(DEADLINE_SECS, TimeUnit.SECONDS);
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
  public void close() {
    managed.shutdown();
    try {
      managed.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
