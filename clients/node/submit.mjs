#!/usr/bin/env node
// Submits a batch job and waits for it to finish.
//
//   node submit.mjs NAME [--pool /default] [--instances 3] [--cpu-millis 100] [--timeout 120] [--env K=V] -- COMMAND [ARGS...]
//
// Prints the job id, then its final state and task counts; exits 0 only if
// the job SUCCEEDED (1 on any other end or error, 2 on bad usage). Server,
// token and CA come from PACELINE_SERVER, PACELINE_TOKEN and PACELINE_CA_CERT.

import { parseArgs } from "node:util";

import { connect, statusName } from "./index.mjs";

const USAGE =
  "usage: submit.mjs [--pool /default] [--instances 3] [--cpu-millis 100] [--timeout SECONDS] [--env K=V]... NAME -- COMMAND [ARGS...]";

/** @param {string} message */
function usage(message) {
  console.error(`${USAGE}\nerror: ${message}`);
  return 2;
}

/**
 * @param {string} value
 * @returns {number} a non-negative number, or NaN
 */
function number(value) {
  const n = Number(value);
  return value.trim() !== "" && Number.isFinite(n) && n >= 0 ? n : Number.NaN;
}

async function main() {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        pool: { type: "string", default: "/default" },
        instances: { type: "string", default: "3" },
        "cpu-millis": { type: "string", default: "100" },
        timeout: { type: "string", default: "120" },
        env: { type: "string", multiple: true, default: [] },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (e) {
    return usage(/** @type {Error} */ (e).message);
  }
  const { values: a, positionals } = parsed;
  if (a.help) {
    console.log(USAGE);
    return 0;
  }
  if (positionals.length < 2) return usage("give a NAME and a COMMAND");
  const [name, command, ...args] = positionals;
  const instances = number(a.instances);
  const cpuMillis = number(a["cpu-millis"]);
  const timeout = number(a.timeout);
  if (!Number.isInteger(instances)) return usage(`--instances ${a.instances} is not a whole number`);
  if (!Number.isInteger(cpuMillis)) return usage(`--cpu-millis ${a["cpu-millis"]} is not a whole number`);
  if (Number.isNaN(timeout)) return usage(`--timeout ${a.timeout} is not a number of seconds`);
  /** @type {Record<string, string>} */
  const env = {};
  for (const kv of a.env) {
    const eq = kv.indexOf("=");
    if (eq < 0) return usage(`--env ${kv} is not KEY=VALUE`);
    env[kv.slice(0, eq)] = kv.slice(eq + 1);
  }

  let client;
  try {
    client = connect();
  } catch (e) {
    // An https server without a readable CA certificate.
    console.error("error:", /** @type {Error} */ (e).message);
    return 1;
  }
  try {
    const spec = {
      name,
      pool: a.pool,
      kind: "JOB_KIND_BATCH",
      instanceCount: instances,
      defaultTask: { command, args, env, resources: { cpuMillis, memoryMib: 32, diskMib: 10 } },
    };
    let id;
    try {
      ({ id } = await client.createJob(spec));
    } catch (e) {
      const err = /** @type {any} */ (e);
      console.error(`error: ${statusName(err)}: ${err.details ?? err.message}`);
      return 1;
    }
    console.log("job", id);
    let job;
    try {
      job = await client.waitForJob(id, { timeoutMs: timeout * 1000 });
    } catch (e) {
      const err = /** @type {any} */ (e);
      console.error(
        err.code === "TIMEOUT" ? `error: ${err.message}` : `error: ${statusName(err)}: ${err.details ?? err.message}`,
      );
      return 1;
    }
    const state = job.status.state.replace(/^JOB_STATE_/, "");
    const counts = Object.entries(job.status.taskCounts)
      .sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))
      .map(([k, v]) => `${k}=${v}`);
    console.log(["state", state, ...counts].join(" "));
    return state === "SUCCEEDED" ? 0 : 1;
  } finally {
    client.close();
  }
}

process.exitCode = await main();
