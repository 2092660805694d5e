// The Paceline web UI: one page over the JSON routes of the API process
// (/ui/api/...), which answer with the public API's messages in their
// proto3 JSON mapping. No framework and no build step.
"use strict";

const state = { tab: "jobs", job: null };

function token() {
  return localStorage.getItem("paceline-token") || "";
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (token()) headers["Authorization"] = "Bearer " + token();
  const response = await fetch("/ui/api/" + path, Object.assign({}, options, { headers }));
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) {
    const error = new Error(body.error || response.statusText);
    error.status = response.status;
    throw error;
  }
  return body;
}

function showError(error) {
  const p = document.getElementById("error");
  if (!error) {
    p.hidden = true;
    return;
  }
  const fresh = p.hidden;
  p.hidden = false;
  const refused = error.status === 401 || error.status === 403;
  p.textContent = refused
    ? "Not allowed: " + error.message + " (enter a token above)"
    : "Error: " + error.message;
  // Point at the field that fixes it, once (not on every refresh, which
  // would pull the focus away from whatever the user clicked since).
  if (refused && fresh) document.getElementById("token").focus();
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "style") e.setAttribute("style", v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return e;
}

// Enum names without their prefix: TASK_STATE_RUNNING -> RUNNING.
function short(name, prefix) {
  return String(name || "").replace(prefix, "");
}

function num(v) {
  return Number(v || 0);
}

function pct(part, whole) {
  return whole > 0 ? Math.min(100, (100 * part) / whole) : 0;
}

async function renderJobs() {
  const body = await api("jobs");
  const tbody = document.querySelector("#jobs-table tbody");
  tbody.replaceChildren();
  for (const job of body.jobs || []) {
    const spec = job.spec || {};
    const status = job.status || {};
    const counts = Object.entries(status.task_counts || {}).map(([k, v]) => k + "=" + v).join(" ");
    const row = el("tr", { class: "clickable" + (state.job === job.id ? " selected" : ""), "data-job-id": job.id },
      el("td", {}, job.id), el("td", {}, spec.name), el("td", {}, short(spec.kind, "JOB_KIND_")),
      el("td", {}, spec.pool), el("td", { class: "state" }, short(status.state, "JOB_STATE_")), el("td", {}, counts));
    row.addEventListener("click", () => { state.job = job.id; render(); });
    tbody.append(row);
  }
  const detail = document.getElementById("job-detail");
  if (!state.job) {
    detail.hidden = true;
    return;
  }
  const one = await api("jobs/" + encodeURIComponent(state.job));
  detail.hidden = false;
  detail.setAttribute("data-job-id", state.job);
  document.getElementById("job-title").textContent = "Tasks of " + state.job;
  // Why instances wait, and warnings such as "can never fit" (decision 0026).
  const status = (one.job && one.job.status) || {};
  document.getElementById("job-pending").textContent =
    [status.pending_summary || ""].concat(status.warnings || []).filter(Boolean).join(" · ");
  const tasks = document.querySelector("#tasks-table tbody");
  tasks.replaceChildren();
  for (const t of one.tasks || []) {
    tasks.append(el("tr", { "data-instance": String(t.instance || 0), "data-state": short(t.state, "TASK_STATE_") },
      el("td", {}, t.instance || 0), el("td", {}, short(t.state, "TASK_STATE_")), el("td", {}, t.host || ""),
      el("td", {}, t.run_id || ""),
      el("td", { "data-pending-kind": t.pending_kind || "" }, (t.pending_kind || "").replace(/_/g, " ")),
      el("td", { class: "reason" }, t.pending_reason || t.reason || t.message || "")));
  }
  const events = document.querySelector("#events-table tbody");
  events.replaceChildren();
  for (const e of one.events || []) {
    // 64-bit integers arrive as strings in the proto3 JSON mapping.
    const seen = new Date(Number(e.last_seen_ms || 0)).toLocaleString();
    const object = e.instance === undefined ? "job" : "task " + e.instance;
    events.append(el("tr", { "data-reason": e.reason || "", "data-count": String(e.count || 1) },
      el("td", {}, seen), el("td", {}, short(e.type, "EVENT_TYPE_")), el("td", {}, e.reason || ""),
      el("td", {}, e.count || "1"), el("td", {}, object), el("td", { class: "reason" }, e.message || "")));
  }
  if (one.events_hidden) {
    // The server withholds another team's events; say so rather than show an empty table.
    events.append(el("tr", { class: "events-hidden" }, el("td", { colspan: "6" }, "events hidden: " + one.events_hidden)));
  }
}

function bar(kind, entitlement, allocation, capacity, unit) {
  return [
    el("span", {}, kind),
    el("div", { class: "bar", "data-kind": kind },
      el("span", { class: "entitlement", style: "width:" + pct(entitlement, capacity).toFixed(2) + "%" }),
      el("span", { class: "allocation", style: "width:" + pct(allocation, capacity).toFixed(2) + "%" })),
    el("span", { class: "num" }, allocation + " / " + entitlement + " " + unit + " (allocated / entitled)"),
  ];
}

async function renderPools() {
  const body = await api("pools");
  const capacity = body.capacity || {};
  const tree = document.getElementById("pool-tree");
  tree.replaceChildren();
  for (const pool of body.pools || []) {
    const path = pool.path || "/";
    const depth = path === "/" ? 0 : path.split("/").length - 1;
    const ent = pool.entitlement || {};
    const alloc = pool.allocation || {};
    const box = el("div", { class: "pool", "data-pool": path, style: "margin-left:" + 1.5 * depth + "rem" },
      el("span", { class: "name" }, path),
      el("span", { class: "num" }, "  demand cpu " + num((pool.demand || {}).cpu) + " · share cpu " + num(((pool.spec || {}).share || {}).cpu)));
    const bars = el("div", { class: "bars" });
    bars.append(...bar("cpu", num(ent.cpu), num(alloc.cpu), num(capacity.cpu_millis), "millicores"));
    bars.append(...bar("memory", num(ent.memory), num(alloc.memory), num(capacity.memory_mib), "MiB"));
    box.append(bars);
    tree.append(box);
  }
}

async function renderHosts() {
  const body = await api("hosts");
  const tbody = document.querySelector("#hosts-table tbody");
  tbody.replaceChildren();
  for (const h of body.hosts || []) {
    const total = h.total || {};
    const used = h.allocated || {};
    const util = (u, t) => el("td", {}, el("div", { class: "bar util" }, el("span", { class: "used", style: "width:" + pct(num(u), num(t)).toFixed(2) + "%" })),
      el("span", { class: "num" }, num(u) + " / " + num(t)));
    tbody.append(el("tr", { "data-host": h.hostname, "data-cpu-used": String(num(used.cpu_millis)) },
      el("td", {}, h.hostname), el("td", {}, short(h.state, "HOST_STATE_") + (h.reachable ? "" : " (unreachable)")),
      util(used.cpu_millis, total.cpu_millis), util(used.memory_mib, total.memory_mib)));
  }
}

async function renderPlugins() {
  const body = await api("plugins");
  const list = document.getElementById("plugin-slots");
  list.replaceChildren();
  for (const slot of body.slots || []) {
    const active = slot.active || "";
    const rollback = el("button", { class: "rollback", "data-slot": slot.slot }, "Roll back");
    // Rolling back needs an earlier version (or the native policy) to go to.
    rollback.disabled = !active;
    rollback.addEventListener("click", async () => {
      if (!confirm("Roll back " + slot.slot + " from " + (active || "the native policy") + "?")) return;
      try {
        await api("plugins/rollback", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ slot: slot.slot }) });
        showError(null);
      } catch (e) {
        showError(e);
      }
      render();
    });
    const versions = el("ul", {});
    for (const v of slot.versions || []) {
      const id = v.id;
      versions.append(el("li", { class: id === active ? "active" : "", "data-version": id },
        id + (id === active ? " (active)" : "") + " · " + v.state
        + " · calls " + num(v.calls) + " · p99 " + num(v.p99_us) + " µs" + (v.batched ? " · batched" : "")));
    }
    list.append(el("div", { class: "slot", "data-slot": slot.slot, "data-active-version": active },
      el("h3", {}, slot.slot, rollback), versions));
  }
}

// The audit log, newest first, with the filters of the form above it.
async function renderAudit() {
  const params = new URLSearchParams({ limit: "100" });
  for (const [field, id] of [["principal", "audit-principal"], ["job_id", "audit-job"], ["method", "audit-method"]]) {
    const value = document.getElementById(id).value.trim();
    if (value) params.set(field, value);
  }
  const body = await api("audit?" + params.toString());
  const tbody = document.querySelector("#audit-table tbody");
  tbody.replaceChildren();
  for (const r of body.records || []) {
    const code = r.code || "OK";
    const outcome = r.message ? code + ": " + r.message : code;
    const when = new Date(num(r.at_ms)).toISOString().replace("T", " ").slice(0, 19);
    tbody.append(el("tr", { "data-method": r.method || "", "data-target": r.target || "", "data-code": code, "data-principal": r.principal || "" },
      el("td", {}, when), el("td", {}, (r.principal || "") + (r.role ? " (" + r.role + ")" : "")),
      el("td", {}, String(r.method || "").replace("/paceline.v1.", "")), el("td", {}, r.target || "-"),
      el("td", { class: code === "OK" ? "ok" : "refused" }, outcome), el("td", {}, r.summary || "")));
  }
}

document.getElementById("audit-filters").addEventListener("submit", (event) => {
  event.preventDefault();
  render();
});

// The Simulate tab is instructions: the command that records this server.
async function renderSimulate() {
  document.getElementById("sim-record").textContent =
    "paceline trace record --server " + window.location.origin + " --out trace.jsonl";
}

const renderers = { jobs: renderJobs, pools: renderPools, hosts: renderHosts, plugins: renderPlugins, audit: renderAudit, simulate: renderSimulate };

async function render() {
  try {
    await renderers[state.tab]();
    showError(null);
  } catch (e) {
    showError(e);
  }
  document.body.setAttribute("data-rendered", String(Date.now()));
}

for (const button of document.querySelectorAll("#tabs button")) {
  button.addEventListener("click", () => {
    state.tab = button.dataset.tab;
    for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b === button);
    for (const s of document.querySelectorAll("section.tab")) s.hidden = s.id !== state.tab;
    render();
  });
}

// Show the kept token (masked) so the user sees one is in use.
document.getElementById("token").value = token();
document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  localStorage.setItem("paceline-token", document.getElementById("token").value.trim());
  render();
});

render();
setInterval(render, 3000);
