// Paceline's Node.js client: the paceline.v1 gRPC API, loaded at run time
// from proto/paceline/v1 with @grpc/proto-loader (so nothing generated is
// committed and the client cannot drift from the protos), a connect helper
// that finds the server, attaches a bearer token and trusts a cluster's own
// certificate authority, and promise-returning wrappers for the common calls.
//
//   import { connect } from "./clients/node/index.mjs";
//   const c = connect();          // PACELINE_SERVER, PACELINE_TOKEN, PACELINE_CA_CERT
//   const { id } = await c.createJob({ name: "etl", pool: "/default", ... });
//   const job = await c.waitForJob(id);
//
// Every message, field and RPC is documented in the .proto files. Messages
// are plain objects with camelCase field names (`instanceCount`,
// `defaultTask`); enums are their names ("JOB_STATE_SUCCEEDED"); 64-bit
// integers are decimal strings (JavaScript numbers lose precision past 2^53);
// `bytes` are Buffers. Every service's raw client is there too (`c.jobs`,
// `c.tasks`, `c.pools`, `c.hosts`, `c.plugins`, `c.watch`, ...), for the calls
// the wrappers do not cover.

import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

export { grpc };

/** Where `paceline dev` listens. */
export const DEFAULT_SERVER = "http://127.0.0.1:7400";

/** The repository's proto/ directory (this package lives in clients/node). */
export const DEFAULT_PROTO_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "proto");

/** Job states after which a job changes no more. */
export const TERMINAL_JOB_STATES = new Set(["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_KILLED"]);

// How proto-loader maps messages to JavaScript values (see the header).
const LOADER_OPTIONS = { keepCase: false, longs: String, enums: String, bytes: Buffer, defaults: true, oneofs: true };

const apis = new Map();

/**
 * Loads every .proto of paceline/v1 under `protoDir` (once per directory)
 * and returns the `paceline.v1` package: service constructors and message
 * types by name. Throws when a file is missing or does not parse.
 *
 * @param {string} [protoDir] the directory holding paceline/v1/*.proto
 * @returns {grpc.GrpcObject} the paceline.v1 package
 */
export function loadApi(protoDir = process.env.PACELINE_PROTO_DIR || DEFAULT_PROTO_DIR) {
  let api = apis.get(protoDir);
  if (!api) {
    // Every file, not a list: a new service is in the client as soon as its
    // .proto is.
    const files = readdirSync(join(protoDir, "paceline", "v1"))
      .filter((f) => f.endsWith(".proto"))
      .sort()
      .map((f) => `paceline/v1/${f}`);
    const definition = protoLoader.loadSync(files, { ...LOADER_OPTIONS, includeDirs: [protoDir] });
    api = /** @type {grpc.GrpcObject} */ (/** @type {grpc.GrpcObject} */ (grpc.loadPackageDefinition(definition).paceline).v1);
    apis.set(protoDir, api);
  }
  return api;
}

/**
 * Adds `authorization: Bearer TOKEN` to every call on a plain-text channel:
 * gRPC's call credentials need TLS, and `paceline dev` on loopback has none.
 *
 * @param {string} token
 * @returns {grpc.Interceptor}
 */
function bearerInterceptor(token) {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set("authorization", `Bearer ${token}`);
        next(metadata, listener);
      },
    });
}

/**
 * @typedef {object} ConnectOptions
 * @property {string} [token] bearer token for a server with a tokens file;
 *   default PACELINE_TOKEN.
 * @property {string} [caFile] path of the PEM certificate of the authority
 *   that signed an https server's certificate; default PACELINE_CA_CERT.
 *   Required for https.
 * @property {string} [protoDir] where paceline/v1/*.proto are; default the
 *   repository's proto/ (or PACELINE_PROTO_DIR).
 */

/**
 * Connects to a Paceline server. Nothing is dialled until the first call.
 *
 * @param {string} [server] `http://host:port`, `https://host:port` or
 *   `host:port` (plain); default PACELINE_SERVER, else DEFAULT_SERVER. A
 *   comma-separated list (a highly available cluster) uses its first address.
 * @param {ConnectOptions} [options]
 * @returns {Client}
 * @throws {Error} for https without a CA certificate, or one that cannot be read
 */
export function connect(server, options = {}) {
  const address = (server || process.env.PACELINE_SERVER || DEFAULT_SERVER).split(",")[0].trim();
  const token = options.token ?? process.env.PACELINE_TOKEN ?? "";
  const caFile = options.caFile || process.env.PACELINE_CA_CERT || "";
  const api = loadApi(options.protoDir);
  let target;
  let credentials;
  /** @type {grpc.Interceptor[]} */
  const interceptors = [];
  if (address.startsWith("https://")) {
    if (!caFile) {
      throw new Error(`${address} is https: give the authority's certificate (caFile or PACELINE_CA_CERT)`);
    }
    target = address.slice("https://".length);
    credentials = grpc.credentials.createSsl(readFileSync(caFile));
    if (token) {
      credentials = grpc.credentials.combineChannelCredentials(
        credentials,
        grpc.credentials.createFromMetadataGenerator((_params, callback) => {
          const metadata = new grpc.Metadata();
          metadata.set("authorization", `Bearer ${token}`);
          callback(null, metadata);
        }),
      );
    }
  } else {
    target = address.startsWith("http://") ? address.slice("http://".length) : address;
    credentials = grpc.credentials.createInsecure();
    if (token) interceptors.push(bearerInterceptor(token));
  }
  return new Client(api, target, credentials, interceptors);
}

/**
 * A client of every paceline.v1 service over one channel.
 */
export class Client {
  /**
   * @param {grpc.GrpcObject} api the paceline.v1 package (loadApi)
   * @param {string} target host:port
   * @param {grpc.ChannelCredentials} credentials
   * @param {grpc.Interceptor[]} [interceptors]
   */
  constructor(api, target, credentials, interceptors = []) {
    this.api = api;
    /** @type {grpc.Channel} */
    this.channel = new grpc.Channel(target, credentials, {});
    /** @param {string} name */
    const stub = (name) => {
      const Service = /** @type {grpc.ServiceClientConstructor} */ (api[name]);
      return new Service(target, credentials, { channelOverride: this.channel, interceptors });
    };
    /** @type {any} */ this.jobs = stub("JobService");
    /** @type {any} */ this.tasks = stub("TaskService");
    /** @type {any} */ this.pools = stub("PoolService");
    /** @type {any} */ this.hosts = stub("HostService");
    /** @type {any} */ this.plugins = stub("PluginService");
    /** @type {any} */ this.watch = stub("WatchService");
    /** @type {any} */ this.audit = stub("AuditService");
    /** @type {any} */ this.operator = stub("OperatorService");
    /** @type {any} */ this.secrets = stub("SecretService");
  }

  /** Closes the channel; calls after this fail. */
  close() {
    this.channel.close();
  }

  /**
   * Creates a job. Leave `owner` empty and the job is the caller's (the
   * token's principal).
   *
   * @param {object} spec a paceline.v1.JobSpec
   * @param {{deadline?: Date|number}} [callOptions]
   * @returns {Promise<{id: string, owner: string, warnings: string[]}>}
   */
  createJob(spec, callOptions = {}) {
    return unary(this.jobs, "createJob", { spec }, callOptions);
  }

  /**
   * One job, with its spec and status.
   *
   * @param {string} id
   * @param {{deadline?: Date|number}} [callOptions]
   * @returns {Promise<any>} a paceline.v1.Job
   */
  async getJob(id, callOptions = {}) {
    const response = await unary(this.jobs, "getJob", { id }, callOptions);
    return response.job;
  }

  /**
   * Polls a job until it is SUCCEEDED, FAILED or KILLED and returns it.
   * Rejects with the call's error, or with an Error whose `code` is
   * "TIMEOUT" once `timeoutMs` has passed.
   *
   * @param {string} id
   * @param {{timeoutMs?: number, intervalMs?: number}} [options] default 120 s and 300 ms
   * @returns {Promise<any>} the finished paceline.v1.Job
   */
  async waitForJob(id, { timeoutMs = 120_000, intervalMs = 300 } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const job = await this.getJob(id, { deadline });
      if (TERMINAL_JOB_STATES.has(job.status?.state)) return job;
      if (Date.now() + intervalMs > deadline) {
        throw Object.assign(new Error(`job ${id} not finished after ${timeoutMs / 1000}s`), { code: "TIMEOUT" });
      }
      await sleep(intervalMs);
    }
  }

  /**
   * A job's tasks, ordered by instance: every page (the server sends at
   * most 5,000 tasks a reply).
   *
   * @param {string} jobId
   * @param {string[]} [states] only these ("TASK_STATE_RUNNING", ...); all when empty
   * @param {{deadline?: Date|number}} [callOptions]
   * @returns {Promise<any[]>} paceline.v1.Task objects
   */
  async listTasks(jobId, states = [], callOptions = {}) {
    const tasks = [];
    let pageToken = "";
    do {
      const response = await unary(this.tasks, "listTasks", { jobId, states, pageToken }, callOptions);
      tasks.push(...(response.tasks || []));
      pageToken = response.nextPageToken || "";
    } while (pageToken);
    return tasks;
  }

  /**
   * A run's stdout or stderr, as it streams: `for await (const data of
   * c.taskLogs(id, 0)) process.stdout.write(data)`. Breaking out of the loop
   * cancels the call.
   *
   * @param {string} jobId
   * @param {number} instance
   * @param {{run?: number|string, stream?: "stdout"|"stderr", offset?: number|string, follow?: boolean}} [options]
   *   run 0 (default) is the current one; a negative offset counts from the end;
   *   follow keeps streaming until the run ends
   * @returns {AsyncGenerator<Buffer>} the log's bytes, chunk by chunk
   */
  async *taskLogs(jobId, instance, { run = 0, stream = "stdout", offset = 0, follow = false } = {}) {
    const call = this.tasks.taskLogs({ task: { jobId, instance }, run, stream, offset, follow });
    try {
      for await (const chunk of call) yield chunk.data;
    } finally {
      call.cancel();
    }
  }
}

/**
 * One unary call as a promise.
 *
 * @param {any} stub a service client
 * @param {string} method its method, camelCase
 * @param {object} request
 * @param {{deadline?: Date|number}} callOptions
 * @returns {Promise<any>}
 */
function unary(stub, method, request, callOptions) {
  return new Promise((resolve, reject) => {
    stub[method](request, new grpc.Metadata(), callOptions, (/** @type {any} */ err, /** @type {any} */ response) =>
      err ? reject(err) : resolve(response),
    );
  });
}

/**
 * The name of a gRPC error's status ("UNAUTHENTICATED"), or "UNKNOWN".
 *
 * @param {any} err
 * @returns {string}
 */
export function statusName(err) {
  return typeof err?.code === "number" ? (grpc.status[err.code] ?? "UNKNOWN") : "UNKNOWN";
}
