"""Paceline's Python client: the generated `paceline.v1` stubs plus a connect
helper that finds the server, attaches a bearer token and trusts a cluster's
own certificate authority.

    import paceline_client as pc
    c = pc.connect()                      # PACELINE_SERVER, PACELINE_TOKEN, PACELINE_CA_CERT
    job_id = c.jobs.CreateJob(pc.job_pb2.CreateJobRequest(spec=...)).id

The stubs are generated from proto/paceline/v1 by `clients/build.sh python`
into `paceline_client/gen/` (not committed, so they never drift from the
protos). Every message, field and RPC is documented in those .proto files.
"""
import os
import sys

_GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen")
if not os.path.isdir(os.path.join(_GEN, "paceline")):
    raise ImportError("paceline_client: generated code missing; run clients/build.sh python")
# The generated modules import each other as `paceline.v1.*_pb2`.
if _GEN not in sys.path:
    sys.path.insert(0, _GEN)

import grpc  # noqa: E402
from paceline.v1 import host_pb2, host_pb2_grpc, job_pb2, job_pb2_grpc, plugin_pb2, plugin_pb2_grpc  # noqa: E402
from paceline.v1 import pool_pb2, pool_pb2_grpc, task_pb2, task_pb2_grpc, types_pb2, watch_pb2, watch_pb2_grpc  # noqa: E402

__all__ = ["connect", "Client", "host_pb2", "job_pb2", "plugin_pb2", "pool_pb2", "task_pb2", "types_pb2", "watch_pb2"]

DEFAULT_SERVER = "http://127.0.0.1:7400"


class _Bearer(grpc.AuthMetadataPlugin):
    def __init__(self, token):
        self._token = token

    def __call__(self, context, callback):
        callback((("authorization", "Bearer " + self._token),), None)


class _BearerInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                         grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token on plain-text channels (gRPC's call credentials need TLS)."""

    def __init__(self, token):
        self._header = ("authorization", "Bearer " + token)

    def _with_token(self, details):
        metadata = list(details.metadata or []) + [self._header]
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else _Details(details, metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)


class _Details(grpc.ClientCallDetails):
    def __init__(self, details, metadata):
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = getattr(details, "wait_for_ready", None)
        self.compression = getattr(details, "compression", None)


class Client:
    """Stubs of every `paceline.v1` service over one channel."""

    def __init__(self, channel):
        self.channel = channel
        self.jobs = job_pb2_grpc.JobServiceStub(channel)
        self.tasks = task_pb2_grpc.TaskServiceStub(channel)
        self.pools = pool_pb2_grpc.PoolServiceStub(channel)
        self.hosts = host_pb2_grpc.HostServiceStub(channel)
        self.plugins = plugin_pb2_grpc.PluginServiceStub(channel)
        self.watch = watch_pb2_grpc.WatchServiceStub(channel)

    def close(self):
        self.channel.close()


def connect(server=None, token=None, ca_cert=None):
    """Connects to a Paceline server.

    server: `http://host:port`, `https://host:port` or `host:port` (plain);
        default PACELINE_SERVER, else http://127.0.0.1:7400.
    token: bearer token for a server with a tokens file; default PACELINE_TOKEN.
    ca_cert: path of the PEM certificate of the authority that signed an
        https server's certificate; default PACELINE_CA_CERT. Required for https.
    """
    server = server or os.environ.get("PACELINE_SERVER") or DEFAULT_SERVER
    token = token if token is not None else os.environ.get("PACELINE_TOKEN", "")
    ca_cert = ca_cert or os.environ.get("PACELINE_CA_CERT")
    # A comma-separated list (HA) is accepted; the first address is used.
    server = server.split(",")[0].strip()
    if server.startswith("https://"):
        if not ca_cert:
            raise ValueError("%s is https: give the authority's certificate (ca_cert or PACELINE_CA_CERT)" % server)
        with open(ca_cert, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        if token:
            creds = grpc.composite_channel_credentials(creds, grpc.metadata_call_credentials(_Bearer(token)))
        channel = grpc.secure_channel(server[len("https://"):], creds)
    else:
        target = server[len("http://"):] if server.startswith("http://") else server
        channel = grpc.insecure_channel(target)
        if token:
            channel = grpc.intercept_channel(channel, _BearerInterceptor(token))
    return Client(channel)
