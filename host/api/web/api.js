// Talking to the server: the JSON routes, the caller's token, and the two
// live streams (cluster changes as Server-Sent Events, a task's log). Both
// streams are read with fetch so that they carry the same Authorization
// header as every other call (EventSource cannot send one).

const TOKEN_KEY = "paceline-token";

export function token() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  localStorage.setItem(TOKEN_KEY, value.trim());
}

// Every call carries X-Paceline-Request: the server refuses changes without
// it, and a page of another site cannot send it (it is not a header a
// "simple" cross-origin request may carry, and the server grants no CORS).
function headers(extra = {}) {
  const h = Object.assign({ "X-Paceline-Request": "ui" }, extra);
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

// An error from the server: its message, HTTP status and any detail (line).
export class ApiError extends Error {
  constructor(status, body) {
    super(body.error || ("HTTP " + status));
    this.status = status;
    this.body = body;
  }
}

export async function api(path, options = {}) {
  const response = await fetch("/ui/api/" + path, Object.assign({}, options, { headers: headers(options.headers) }));
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// A route's body as text (a sim report), with the caller's token.
export async function apiText(path) {
  const response = await fetch("/ui/api/" + path, { headers: headers() });
  const text = await response.text();
  if (!response.ok) {
    let body = {};
    try { body = JSON.parse(text); } catch (_) { body = { error: response.statusText }; }
    throw new ApiError(response.status, body);
  }
  return text;
}

export function post(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}) });
}

// A job file's text (YAML), as `paceline job create` reads it.
export function postText(path, text) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/yaml" }, body: text });
}

let me = null;

// Who the token names (null until known): {name, role, pools, tokens_required}.
export async function whoami(refresh = false) {
  if (refresh || !me) me = await api("whoami").catch(() => null);
  return me;
}

const ROLES = ["user", "author", "operator", "admin"];

export function atLeast(who, role) {
  return !!who && ROLES.indexOf(who.role) >= ROLES.indexOf(role);
}

// Whether `pool` is `grant` or below it, as the server decides (auth.rs).
function within(pool, grant) {
  const g = grant.replace(/\/+$/, "");
  return g === "" || pool === g || pool.startsWith(g + "/");
}

// Whether the caller may change jobs in `pool` (the server checks again).
export function mayChangeJobsIn(who, pool) {
  return atLeast(who, "operator") || (!!who && (who.pools || []).some((g) => within(pool, g)));
}

// Reads a fetch body as it arrives, handing each decoded piece to `onText`.
async function pump(response, onText) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    onText(decoder.decode(value, { stream: true }));
  }
}

// The cluster's changes: calls onChange(WatchEvent) for each and
// onState("live" | "reconnecting" | "offline", why) as the connection
// comes and goes. Reconnects with a growing pause (1 s to 15 s), resuming
// from the last revision seen, and calls onReset() when the server could
// not resume (the page then re-reads what it shows).
export function follow({ onChange, onState, onReset }) {
  let revision = 0;
  let pause = 1000;
  let controller = null;
  let stopped = false;
  let lastByte = Date.now();

  async function once() {
    controller = new AbortController();
    const response = await fetch("/ui/api/events" + (revision ? "?from_revision=" + revision : ""),
      { headers: headers({ Accept: "text/event-stream" }), signal: controller.signal });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new ApiError(response.status, body);
    }
    onState("live");
    pause = 1000;
    let buffer = "";
    await pump(response, (text) => {
      lastByte = Date.now();
      buffer += text;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const fields = { event: "message", data: "", id: "" };
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue; // keep-alive comment
          const at = line.indexOf(":");
          const key = at < 0 ? line : line.slice(0, at);
          const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
          fields[key] = key === "data" && fields.data ? fields.data + "\n" + value : value;
        }
        if (fields.event === "change" && fields.data) {
          if (fields.id) revision = Number(fields.id);
          onChange(JSON.parse(fields.data));
        } else if (fields.event === "reset") {
          revision = 0;
          onReset(fields.data);
        }
      }
    });
  }

  async function loop() {
    while (!stopped) {
      try {
        await once();
        if (!stopped) onState("reconnecting", "the server closed the stream");
      } catch (e) {
        if (stopped) return;
        onState(e.status === 401 || e.status === 403 ? "offline" : "reconnecting", e.message);
        if (e.status === 401 || e.status === 403) return;
      }
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(15000, pause * 2);
    }
  }

  // The server sends a comment every 10 s: silence for 25 s is a dead connection.
  const watchdog = setInterval(() => {
    if (controller && Date.now() - lastByte > 25000) {
      lastByte = Date.now();
      controller.abort();
    }
  }, 5000);
  loop();
  return {
    stop() {
      stopped = true;
      clearInterval(watchdog);
      if (controller) controller.abort();
    },
    restart() {
      if (controller) controller.abort();
    },
  };
}

// A task's log: the last 64 KiB, then what is written while the run lives.
// Returns an AbortController; onEnd(error|null) when the stream ends.
export function streamLog(job, instance, stream, onText, onEnd) {
  const controller = new AbortController();
  const url = "/ui/api/tasks/" + encodeURIComponent(job) + "/" + instance + "/logs?follow=true&offset=-65536&stream=" + stream;
  (async () => {
    const response = await fetch(url, { headers: headers(), signal: controller.signal });
    if (!response.ok) {
      const body = await response.json().catch(() => ({ error: response.statusText }));
      throw new ApiError(response.status, body);
    }
    await pump(response, onText);
  })().then(() => onEnd(null), (e) => { if (e.name !== "AbortError") onEnd(e); });
  return controller;
}
