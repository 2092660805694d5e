// Pools, hosts, plugins, the audit log and the simulator's instructions.
import { api, apiText, atLeast, post } from "./api.js";
import { actionButton, el, facts, field, gpus, link, num, pct, short, table, when } from "./dom.js";

const enc = encodeURIComponent;
const KINDS = [["cpu", "cpu_millis", "millicores"], ["memory", "memory_mib", "MiB"], ["disk", "disk_mib", "MiB"], ["gpu", "gpus", "GPUs"]];

// One kind of an amount: GPU in GPUs with shares as fractions (from
// `gpu_milli`), the other kinds as they are.
function amountOf(o, kind, field) {
  return kind === "gpu" ? gpus(o) : num((o || {})[field]);
}

function changeOf(ev) {
  return ev.change || ev;
}

function bar(kind, entitlement, allocation, capacity, unit) {
  return [
    el("span", {}, kind),
    el("div", { class: "bar", "data-kind": kind, role: "img", "aria-label": kind + ": " + allocation + " of " + entitlement + " " + unit + " entitled" },
      el("span", { class: "entitlement", style: "width:" + pct(entitlement, capacity).toFixed(2) + "%" }),
      el("span", { class: "allocation", style: "width:" + pct(allocation, capacity).toFixed(2) + "%" })),
    el("span", { class: "num" }, allocation + " / " + entitlement + " " + unit + " (allocated / entitled)"),
  ];
}

// One pool's figures per resource kind: reservation, limit, share, entitlement, allocation, demand.
function figures(pool) {
  const spec = pool.spec || {};
  const get = (o, k) => amountOf(o, k, k);
  return table("", "Per resource kind", ["Kind", "Reservation", "Limit", "Share", "Entitlement", "Allocation", "Demand"],
    KINDS.map(([k]) => el("tr", { "data-kind": k }, el("th", { scope: "row" }, k),
      el("td", {}, get(spec.reservation, k)), el("td", {}, get(spec.limit, k) || "none"), el("td", {}, get(spec.share, k)),
      el("td", {}, get(pool.entitlement, k)), el("td", {}, get(pool.allocation, k)), el("td", {}, get(pool.demand, k)))),
    { class: "figures" });
}

function poolBox(pool, capacity) {
  const path = pool.path || "/";
  const depth = path === "/" ? 0 : path.split("/").length - 1;
  const ent = pool.entitlement || {};
  const alloc = pool.allocation || {};
  const box = el("li", { class: "pool", "data-pool": path, style: "margin-left:" + 1.5 * depth + "rem" },
    el("span", { class: "name" }, link("/pools" + (path === "/" ? "/" : path), path)),
    el("span", { class: "num" }, "  demand cpu " + num((pool.demand || {}).cpu) + " · share cpu " + num(((pool.spec || {}).share || {}).cpu)
      + " · tasks " + num(pool.live_tasks)));
  const bars = el("div", { class: "bars" });
  bars.append(...bar("cpu", num(ent.cpu), num(alloc.cpu), num(capacity.cpu_millis), "millicores"));
  bars.append(...bar("memory", num(ent.memory), num(alloc.memory), num(capacity.memory_mib), "MiB"));
  box.append(bars);
  return box;
}

export function pools(view) {
  const tree = el("ul", { id: "pool-tree", class: "tree", "aria-label": "pool tree" });
  view.append(el("h2", {}, "Pools"),
    el("p", { class: "legend" }, el("span", { class: "swatch entitlement" }), " entitlement ", el("span", { class: "swatch allocation" }),
      " allocation (bars relative to the cluster's capacity)"), tree);
  async function refresh() {
    const body = await api("pools");
    tree.replaceChildren(...(body.pools || []).map((p) => poolBox(p, body.capacity || {})));
  }
  return { refresh, wants: (ev) => changeOf(ev).pool !== undefined };
}

export function poolPage(view, [path]) {
  const body = el("div", { id: "pool-detail", "data-pool": path });
  view.append(el("p", { class: "crumbs" }, link("/pools", "Pools"), " / ", path), el("h2", {}, "Pool " + path), body);
  async function refresh() {
    const all = await api("pools");
    const pool = (all.pools || []).find((p) => (p.path || "/") === path);
    if (!pool) {
      body.replaceChildren(el("p", {}, "No pool " + path + "."));
      return;
    }
    const jobs = await api("jobs?limit=100&pool=" + enc(path));
    body.replaceChildren(
      el("ul", { class: "tree" }, poolBox(pool, all.capacity || {})), figures(pool),
      facts([["Children", (pool.children || []).join(", ") || "none"], ["Live tasks", String(num(pool.live_tasks))],
        ["Queued gangs", String(num(pool.queued_gangs))]]),
      el("p", {}, link("/jobs?pool=" + enc(path), "Jobs in " + path + " (" + (jobs.jobs || []).length + (jobs.next_page_token ? "+" : "") + ")")),
      historyCharts(await api("pools/history?path=" + enc(path)), pool));
  }
  return { refresh, wants: (ev) => changeOf(ev).pool === path };
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}

// Allocation against entitlement over the last hour: the server's samples
// (one every 30 s) and the figures of now as the last point.
function historyCharts(history, pool) {
  const now = Date.now();
  const kinds = (e, a) => ({ ec: num(e.cpu), em: num(e.memory), ac: num(a.cpu), am: num(a.memory) });
  const points = (history.samples || []).map((s) => Object.assign({ t: num(s.at_ms) }, kinds(s.entitlement || {}, s.allocation || {})));
  points.push(Object.assign({ t: now }, kinds(pool.entitlement || {}, pool.allocation || {})));
  return el("section", { id: "pool-history", "aria-labelledby": "pool-history-h" },
    el("h3", { id: "pool-history-h" }, "Allocation against entitlement, last hour"),
    chart("cpu", "CPU (millicores)", points, (p) => p.ec, (p) => p.ac, now),
    chart("memory", "Memory (MiB)", points, (p) => p.em, (p) => p.am, now),
    el("p", { class: "reason" }, "Solid: allocation. Dashed: entitlement. A sample every " +
      Math.round(num(history.interval_ms) / 1000) + " s since the server started, at most an hour."));
}

function chart(kind, title, points, entitlement, allocation, now) {
  const width = 600;
  const height = 120;
  const start = now - 3600 * 1000;
  const x = (t) => (Math.max(0, t - start) / (3600 * 1000)) * width;
  const top = Math.max(1, ...points.map(entitlement), ...points.map(allocation));
  const y = (v) => height - (v / top) * (height - 4);
  const line = (f) => points.map((p) => x(p.t).toFixed(1) + "," + y(f(p)).toFixed(1)).join(" ");
  const last = points[points.length - 1];
  const said = title + ": allocation " + allocation(last) + " of entitlement " + entitlement(last) + " now; " +
    points.length + " points over the last hour";
  return el("figure", { class: "history" },
    svg("svg", { id: "history-" + kind, viewBox: "0 0 " + width + " " + height, width: "100%", height: String(height), role: "img", "aria-label": said },
      svg("polyline", { class: "entitlement", "data-points": points.length, points: line(entitlement), fill: "none", stroke: "#5b6b8c", "stroke-dasharray": "6 4", "stroke-width": 2 }),
      svg("polyline", { class: "allocation", "data-points": points.length, points: line(allocation), fill: "none", stroke: "#1d5fbf", "stroke-width": 2 })),
    el("figcaption", {}, said));
}

// Each version's calls, p99 latency and faults over the last hour: the
// server's samples (one every 30 s) and the figures of now as the last
// point; one series per version, told apart by colour and dash. The latest
// figures are also written out (the caption, read by screen readers).
const SERIES = [["#1d5fbf", ""], ["#b3261e", "6 4"], ["#2e7d32", "2 3"], ["#6a3d9a", "10 3 2 3"], ["#8a5a00", "1 5"]];

function versionCharts(history, slot) {
  const now = Date.now();
  const sampled = new Map((history.versions || []).map((v) => [v.id, v.samples || []]));
  const series = (slot.versions || []).map((v) => {
    const points = (sampled.get(v.id) || []).map((p) => ({ t: num(p.at_ms), calls: num(p.calls), p50: num(p.p50_us), p99: num(p.p99_us), faults: num(p.faults) }));
    const faults = Object.values(v.errors || {}).reduce((a, b) => a + num(b), 0);
    points.push({ t: now, calls: num(v.calls), p50: num(v.p50_us), p99: num(v.p99_us), faults });
    return { id: v.id, points };
  });
  if (!series.length) return el("p", { class: "reason" }, "No versions deployed: the native policy serves, and has no charts.");
  return el("section", { id: "plugin-history", "aria-labelledby": "plugin-history-h" },
    el("h3", { id: "plugin-history-h" }, "Calls, latency and faults per version, last hour"),
    versionChart("calls", "Calls (since the server started)", series, (p) => p.calls, now),
    versionChart("p99", "p99 latency (µs)", series, (p) => p.p99, now),
    versionChart("faults", "Faults (since the server started)", series, (p) => p.faults, now),
    el("ul", { id: "plugin-figures", class: "legend" }, series.map((s, i) => {
      const last = s.points[s.points.length - 1];
      const [colour, dash] = SERIES[i % SERIES.length];
      return el("li", { "data-version": s.id, "data-calls": String(last.calls), "data-p50": String(last.p50), "data-p99": String(last.p99), "data-faults": String(last.faults) },
        swatchLine(colour, dash), " " + s.id + ": " + last.calls + " calls, p50 " + last.p50 + " µs, p99 " + last.p99 + " µs, " + last.faults + " faults now");
    })),
    el("p", { class: "reason" }, "A sample every " + Math.round(num(history.interval_ms) / 1000) +
      " s since the server started, at most an hour; calls and faults count from the server's start."));
}

function swatchLine(colour, dash) {
  return svg("svg", { width: 28, height: 10, "aria-hidden": "true" },
    svg("line", { x1: 0, y1: 5, x2: 28, y2: 5, stroke: colour, "stroke-width": 2, "stroke-dasharray": dash || "none" }));
}

function versionChart(kind, title, series, value, now) {
  const width = 600;
  const height = 120;
  const start = now - 3600 * 1000;
  const x = (t) => (Math.max(0, t - start) / (3600 * 1000)) * width;
  const top = Math.max(1, ...series.flatMap((s) => s.points.map(value)));
  const y = (v) => height - (v / top) * (height - 4);
  const said = title + ": " + series.map((s) => s.id + " " + value(s.points[s.points.length - 1])).join(", ") + " now";
  return el("figure", { class: "history" },
    svg("svg", { id: "plugin-history-" + kind, viewBox: "0 0 " + width + " " + height, width: "100%", height: String(height), role: "img", "aria-label": said },
      ...series.flatMap((s, i) => {
        const [colour, dash] = SERIES[i % SERIES.length];
        const last = s.points[s.points.length - 1];
        // The line, and a dot at now (a version sampled once has no line yet).
        return [svg("polyline", { "data-version": s.id, "data-points": s.points.length, "data-latest": value(last),
          points: s.points.map((p) => x(p.t).toFixed(1) + "," + y(value(p)).toFixed(1)).join(" "),
          fill: "none", stroke: colour, "stroke-width": 2, "stroke-dasharray": dash || "none" }),
        svg("circle", { cx: Math.min(x(last.t), width - 4).toFixed(1), cy: Math.min(y(value(last)), height - 4).toFixed(1), r: 3, fill: colour })];
      })),
    el("figcaption", {}, said));
}

function hostActions(h, me) {
  const name = h.hostname;
  const can = atLeast(me, "operator") ? {} : { disabled: true, title: "needs an operator's token" };
  const act = (verb, label, question) => actionButton(label, question, () => post("hosts/" + enc(name) + "/" + verb),
    Object.assign({ "data-host-action": verb, "data-host": name }, can));
  return [act("drain", "Drain", "Drain " + name + "? Its tasks move to other hosts."),
    act("down", "Down", "Take " + name + " down?"), act("up", "Up", "Bring " + name + " back up?")];
}

function hostState(h) {
  return short(h.state, "HOST_STATE_") + (h.reachable ? "" : " (unreachable)");
}

function util(u, t) {
  return el("td", {}, el("div", { class: "bar util", role: "img", "aria-label": num(u) + " of " + num(t) },
    el("span", { class: "used", style: "width:" + pct(num(u), num(t)).toFixed(2) + "%" })), el("span", { class: "num" }, num(u) + " / " + num(t)));
}

export function hosts(view, _p, _q, { me }) {
  const holder = el("div", { class: "scroll" });
  view.append(el("h2", {}, "Hosts"), holder);
  async function refresh() {
    const body = await api("hosts");
    holder.replaceChildren(table("hosts-table", "Hosts", ["Host", "State", "CPU (millicores)", "Memory (MiB)", "Runs", "Actions"],
      (body.hosts || []).map((h) => el("tr", { "data-host": h.hostname, "data-state": short(h.state, "HOST_STATE_"), "data-cpu-used": String(num((h.allocated || {}).cpu_millis)) },
        el("td", {}, link("/hosts/" + enc(h.hostname), h.hostname)), el("td", { class: "state" }, hostState(h)),
        util((h.allocated || {}).cpu_millis, (h.total || {}).cpu_millis), util((h.allocated || {}).memory_mib, (h.total || {}).memory_mib),
        el("td", {}, String(num(h.runs))), el("td", { class: "actions" }, hostActions(h, me))))));
  }
  // Host states are not in the change stream; a task moving is (placements change allocations).
  return { refresh, wants: (ev) => !!changeOf(ev).task };
}

export function hostPage(view, [name], _q, { me }) {
  const body = el("div", { id: "host-detail", "data-host": name });
  view.append(el("p", { class: "crumbs" }, link("/hosts", "Hosts"), " / ", name), el("h2", {}, "Host " + name), body);
  async function refresh() {
    const all = await api("hosts");
    const h = (all.hosts || []).find((x) => x.hostname === name);
    if (!h) {
      body.replaceChildren(el("p", {}, "No host " + name + "."));
      return;
    }
    body.replaceChildren(
      facts([["State", el("span", { id: "host-state", "data-state": short(h.state, "HOST_STATE_") }, hostState(h))],
        ["Provider", h.provider || ""], ["Runs", String(num(h.runs))], ["Last heartbeat", when(h.last_heartbeat_ms)],
        ["Attributes", Object.entries(h.attributes || {}).map(([k, v]) => k + "=" + v).join(", ")]]),
      table("host-resources", "Resources", ["Kind", "Total", "Allocated", "Available"], KINDS.map(([k, f]) =>
        el("tr", { "data-kind": k }, el("th", { scope: "row" }, k), el("td", {}, amountOf(h.total, k, f)), el("td", {}, amountOf(h.allocated, k, f)),
          el("td", {}, amountOf(h.available, k, f))))),
      el("section", { class: "actions", "aria-labelledby": "host-actions-h" }, el("h3", { id: "host-actions-h" }, "Actions"), hostActions(h, me)));
  }
  return { refresh, wants: (ev) => !!changeOf(ev).task };
}

function versionRows(slot) {
  const active = slot.active || "";
  return (slot.versions || []).map((v) => el("tr", { class: v.id === active ? "active" : "", "data-version": v.id },
    el("td", {}, v.id + (v.id === active ? " (active)" : "")), el("td", {}, v.state || ""), el("td", {}, String(num(v.calls))),
    el("td", {}, String(num(v.p50_us))), el("td", {}, String(num(v.p99_us))),
    el("td", {}, Object.entries(v.errors || {}).map(([k, n]) => k + " " + n).join(", ") || "0"), el("td", {}, v.batched ? "yes" : "")));
}

// The latest shadow report of each slot (what `ShadowPlugin` answered).
const reports = new Map();
// The version chosen in each slot's list.
const chosen = new Map();

function slotBox(slot, me, onChange, detailed) {
  const active = slot.active || "";
  const can = atLeast(me, "operator") ? {} : { disabled: true, title: "needs an operator's token" };
  const rollback = actionButton("Roll back", "Roll back " + slot.slot + " from " + (active || "the native policy") + "?",
    async () => { await post("plugins/rollback", { slot: slot.slot }); await onChange(); },
    Object.assign({ class: "rollback", "data-slot": slot.slot }, can));
  if (!active) rollback.disabled = true;
  // The chosen version survives the page's re-reads (it follows placements).
  const choice = el("select", { id: "version-" + slot.slot.replace(/\W/g, "-"), onchange: () => chosen.set(slot.slot, choice.value) },
    (slot.versions || []).map((v) => el("option", { value: v.id, selected: chosen.get(slot.slot) === v.id }, v.id)));
  const report = el("div", { class: "shadow-report", "aria-live": "polite" });
  const showReport = (r) => report.replaceChildren(...shadowReport(r, active, detailed));
  // The server's report of the run going on (ListPlugins carries it); else
  // the last one an action answered (a stopped run's), kept across re-reads.
  if (slot.shadow) reports.set(slot.slot, slot.shadow);
  if (reports.has(slot.slot)) showReport(reports.get(slot.slot));
  const activate = actionButton("Activate", "Activate the chosen version in " + slot.slot + "?",
    async () => { chosen.set(slot.slot, choice.value); await post("plugins/activate", { slot: slot.slot, id: choice.value }); await onChange(); },
    Object.assign({ class: "activate", "data-slot": slot.slot }, can));
  const shadow = actionButton("Shadow", "Run the chosen version beside the active one in " + slot.slot + " and compare?",
    async () => {
      chosen.set(slot.slot, choice.value);
      const r = await post("plugins/shadow", { slot: slot.slot, id: choice.value });
      reports.set(slot.slot, r);
      showReport(r);
    }, Object.assign({ class: "shadow", "data-slot": slot.slot }, can));
  return el("section", { class: "slot", "data-slot": slot.slot, "data-active-version": active, "aria-label": "slot " + slot.slot },
    el("h3", {}, detailed ? slot.slot : link("/plugins/" + slot.slot, slot.slot), rollback),
    table("", "Versions of " + slot.slot, ["Version", "State", "Calls", "p50 µs", "p99 µs", "Faults", "Batched"], versionRows(slot), { class: "versions" }),
    (slot.versions || []).length ? el("div", { class: "inline" }, field("Version", choice), activate, shadow) : null,
    report);
}

// A shadow run's counts and, on a slot's page, its latest disagreements as a
// table: per task, what the active version chose and what the shadow chose.
function shadowReport(r, active, detailed) {
  const counts = "Compared " + num(r.compared) + " decisions; " + num(r.differed) + " differed" +
    (num(r.candidate_faults) ? "; the shadow failed " + num(r.candidate_faults) + " times" : "") +
    (num(r.skipped) ? "; " + num(r.skipped) + " not compared (the shadow was busy)" : "") + ".";
  const rows = (r.disagreements || []).slice().reverse();
  const shadowName = r.candidate || "shadow";
  // Focusable, so a keyboard can scroll a wide table.
  const diff = detailed && rows.length ? el("div", { class: "scroll", tabIndex: 0, role: "region", "aria-label": "shadow disagreements" }, table("shadow-diff",
    "Latest disagreements, newest first (at most 50): where each version put each task",
    ["Task", "Active (" + (active || "native policy") + ") →", "Shadow (" + shadowName + ") →", "Decision", "When (UTC)"],
    rows.map((d) => el("tr", { "data-task": d.task || "", "data-active": d.active || "", "data-shadow": d.shadow || "" },
      el("th", { scope: "row" }, d.task || ""), el("td", { class: "chose-active" }, d.active || ""),
      el("td", { class: "chose-shadow" }, d.shadow || ""),
      el("td", {}, (d.kind || "") + (num(d.round) ? " round " + num(d.round) : "")), el("td", {}, when(d.at_ms)))))) : null;
  const elsewhere = !detailed && rows.length ? el("p", { class: "reason" }, "Per-task disagreements: on the slot's page.") : null;
  return [el("p", {}, counts + (r.candidate ? " Shadowed version: " + r.candidate + "." : "")), diff, elsewhere,
    el("ul", { class: "samples" }, (r.samples || []).map((x) => el("li", {}, el("code", {}, x))))].filter(Boolean);
}

// Deploy a new version from a .wasm file (`paceline plugin deploy` from the browser).
function deployForm(slot, can, onChange) {
  const file = el("input", { id: "wasm-file", type: "file", accept: ".wasm,application/wasm" });
  const name = el("input", { id: "wasm-name", placeholder: "spread" });
  const version = el("input", { id: "wasm-version", placeholder: "2" });
  const result = el("span", { id: "deploy-result", role: "status" });
  const deploy = actionButton("Deploy", "Deploy this component to " + slot + "? It is checked first; it does not become active.",
    async () => {
      const f = file.files && file.files[0];
      if (!f) throw new Error("choose a .wasm file first");
      const params = new URLSearchParams({ slot, name: name.value.trim(), version: version.value.trim() });
      const r = await api("plugins/deploy?" + params.toString(), { method: "POST", headers: { "Content-Type": "application/wasm" }, body: f });
      result.textContent = "Deployed " + r.id + " (sha256 " + String(r.sha256 || "").slice(0, 12) + "…)";
      await onChange();
    }, Object.assign({ id: "deploy-plugin" }, can));
  return el("form", { class: "inline deploy", "aria-label": "Deploy a version", onsubmit: (e) => e.preventDefault() },
    field(".wasm component", file), field("Name", name), field("Version", version), deploy, result);
}

export function plugins(view, _p, _q, { me, refresh: again }) {
  const list = el("div", { id: "plugin-slots" });
  view.append(el("h2", {}, "Plugins"), list);
  async function refresh() {
    const body = await api("plugins");
    list.replaceChildren(...(body.slots || []).map((s) => slotBox(s, me, again, false)));
  }
  return { refresh, wants: () => false };
}

export function pluginPage(view, [slot], _q, { me, refresh: again }) {
  const holder = el("div", { id: "plugin-slots" });
  const can = atLeast(me, "operator") ? {} : { disabled: true, title: "needs an operator's token" };
  // The deploy form stays outside the part re-read on changes: a chosen file is kept.
  view.append(el("p", { class: "crumbs" }, link("/plugins", "Plugins"), " / ", slot), el("h2", {}, "Plugin slot " + slot),
    deployForm(slot, can, again), holder);
  async function refresh() {
    const body = await api("plugins");
    const s = (body.slots || []).find((x) => x.slot === slot);
    if (!s) {
      holder.replaceChildren(el("p", {}, "No slot " + slot + "."));
      return;
    }
    const history = await api("plugins/history?slot=" + enc(slot));
    holder.replaceChildren(slotBox(s, me, again, true), versionCharts(history, s));
  }
  // Plugin changes are not in the change stream, but a task moving means
  // the slots were called: the figures and a shadow run's diff moved too.
  return { refresh, wants: (ev) => !!changeOf(ev).task };
}

export function audit(view, _p, query, { go }) {
  const inputs = [["principal", "audit-principal", "Principal"], ["job_id", "audit-job", "Job id"], ["method", "audit-method", "Method (e.g. KillJob)"]];
  const form = el("form", { id: "audit-filters", class: "filters", "aria-label": "Filter the audit log" },
    inputs.map(([key, id, label]) => field(label, el("input", { id, value: query.get(key) || "" }))),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const [key, id] of inputs) {
      const v = document.getElementById(id).value.trim();
      if (v) next.set(key, v);
    }
    go("/audit?" + next.toString());
  });
  const holder = el("div", { class: "scroll" });
  view.append(el("h2", {}, "Audit log"), form,
    el("p", { class: "legend" }, "Every change made through the API, the CLI or this page, and every refused call, newest first (the last 100 that match)."), holder);
  async function refresh() {
    const params = new URLSearchParams({ limit: "100" });
    for (const [key] of inputs) if (query.get(key)) params.set(key, query.get(key));
    const body = await api("audit?" + params.toString());
    holder.replaceChildren(table("audit-table", "Audit records", ["Time (UTC)", "Principal", "Method", "Target", "Outcome", "Summary"],
      (body.records || []).map((r) => {
        const code = r.code || "OK";
        return el("tr", { "data-method": r.method || "", "data-target": r.target || "", "data-code": code, "data-principal": r.principal || "" },
          el("td", {}, when(r.at_ms)), el("td", {}, (r.principal || "") + (r.role ? " (" + r.role + ")" : "")),
          el("td", {}, String(r.method || "").replace("/paceline.v1.", "")), el("td", {}, r.target || "-"),
          el("td", { class: code === "OK" ? "ok" : "refused" }, r.message ? code + ": " + r.message : code), el("td", {}, r.summary || ""));
      })));
  }
  return { refresh, wants: () => false };
}

export function simulate(view) {
  const holder = el("div", { id: "sim-reports" });
  view.append(el("h2", {}, "Simulations"),
    el("p", {}, "What would another policy have done here? Record this cluster's history as a trace, replay it under any policy, and compare two (docs/sim.md). The replay runs the real roles on a virtual clock."),
    el("ol", {},
      el("li", {}, "Record: ", el("code", { id: "sim-record" }, "paceline trace record --server " + window.location.origin + " --out trace.jsonl")),
      el("li", {}, "Replay under a new plugin: ", el("code", {}, "paceline sim run trace.jsonl --policy placement=my_policy.wasm --report-dir DIR")),
      el("li", {}, "Compare two sets: ", el("code", {}, "paceline sim compare trace.jsonl --a placement=binpack --b placement=spread --report-dir DIR"))),
    el("p", {}, "With DIR the server's reports directory (", el("code", {}, "sim_reports_dir"), ", default ", el("code", {}, "<data_dir>/sim-reports"),
      "), the reports are listed here."),
    holder);
  async function refresh() {
    const body = await api("sim-reports");
    if (!body.dir) {
      holder.replaceChildren(el("p", {}, "This server keeps no simulation reports."));
      return;
    }
    const reports = body.reports || [];
    holder.replaceChildren(reports.length
      ? table("sim-table", "Simulation reports, newest first", ["Report", "Format", "Size (bytes)", "Written (UTC)"],
        reports.map((r) => el("tr", { "data-report": r.name },
          el("td", {}, link("/simulate/" + enc(r.name), r.name)), el("td", {}, r.format), el("td", {}, String(num(r.bytes))), el("td", {}, when(r.modified_ms)))))
      : el("p", { id: "sim-none" }, "No reports yet."));
  }
  return { refresh, wants: () => false };
}

// One report, read with the caller's token and shown in a sandboxed frame:
// no script runs in it, it has no access to this page (nor its token), and
// its policy allows no request (only its inline style and data: images).
const REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

export function simReport(view, [name]) {
  const frameHolder = el("div", { id: "sim-report", "data-report": name });
  view.append(el("p", { class: "crumbs" }, link("/simulate", "Simulations"), " / ", name), el("h2", {}, "Simulation report " + name), frameHolder);
  async function refresh() {
    const text = await apiText("sim-reports/" + enc(name));
    if (name.endsWith(".json")) {
      frameHolder.replaceChildren(el("pre", { class: "scroll", tabIndex: 0, role: "region", "aria-label": "report " + name }, text));
      return;
    }
    const policy = '<meta http-equiv="Content-Security-Policy" content="' + REPORT_CSP + '">';
    const doc = /<head[^>]*>/i.test(text) ? text.replace(/<head[^>]*>/i, (h) => h + policy) : policy + text;
    frameHolder.replaceChildren(el("iframe", { id: "sim-frame", title: "Simulation report " + name, sandbox: "", srcdoc: doc, class: "report" }));
  }
  return { refresh, wants: () => false };
}
