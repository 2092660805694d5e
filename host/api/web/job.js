// A job's page, a task's page (with its log, live), and submitting a job.
import { api, mayChangeJobsIn, post, postText, streamLog } from "./api.js";
import { actionButton, el, facts, field, link, num, short, showError, table, taskGpu, taskUsage, taskUsageShort, when } from "./dom.js";

const enc = encodeURIComponent;

function eventOf(ev) {
  const c = ev.change || ev;
  return { job: c.job, task: c.task, pool: c.pool };
}

// Why an action button is off, for its tooltip and the reader.
function allowed(me, pool) {
  return mayChangeJobsIn(me, pool) ? {} : { disabled: true, title: "your token may not change jobs in " + pool };
}

export function jobPage(view, [id], _query, { me, go }) {
  const title = el("h2", {}, "Job ", el("span", { id: "job-id" }, id));
  const body = el("div", { id: "job-detail", "data-job-id": id });
  view.append(el("p", { class: "crumbs" }, link("/jobs", "Jobs"), " / ", id), title, body);
  let spec = "";
  // The config version shown in "Config versions" and the one it is
  // compared with (0: none), both kept across re-reads, and the specs read
  // so far (a version never changes).
  let chosen = 0;
  let against = 0;
  const versionYaml = new Map();
  // Tasks come a page at a time (the server sends 500 from an offset): how
  // many pages the reader asked to see, kept across re-reads.
  let taskPages = 1;

  function yamlOf(v) {
    if (!versionYaml.has(v)) {
      versionYaml.set(v, api("jobs/" + enc(id) + "/versions/" + v).then((r) => r.spec_yaml || ""));
    }
    return versionYaml.get(v);
  }

  // Every config version the job had, one shown (or its changes against
  // another), and a rollback to it: an update to that version's spec
  // (which becomes a new version).
  function versionsSection(status, can) {
    const latest = Math.max(num(status.latest_config_version), num(status.desired_config_version));
    const desired = num(status.desired_config_version);
    if (!chosen || chosen > latest) chosen = desired || latest;
    if (against === chosen || against > latest) against = 0;
    const label = (v) => {
      const notes = [v === num(status.config_version) ? "running" : "", v === desired ? "desired" : ""].filter(Boolean);
      return "version " + v + (notes.length ? " (" + notes.join(", ") + ")" : "");
    };
    const versions = Array.from({ length: latest }, (_, i) => latest - i);
    const select = el("select", { id: "version-select" }, ...versions.map((v) =>
      el("option", Object.assign({ value: String(v) }, v === chosen ? { selected: true } : {}), label(v))));
    const compare = el("select", { id: "version-compare" },
      el("option", { value: "0" }, "nothing (show the spec)"),
      ...versions.filter((v) => v !== chosen).map((v) =>
        el("option", Object.assign({ value: String(v) }, v === against ? { selected: true } : {}), label(v))));
    const pre = el("pre", { id: "version-spec", tabIndex: 0, role: "region",
      "aria-label": against ? "changes from version " + against + " to version " + chosen : "spec of config version " + chosen }, "…");
    const section = el("section", { id: "job-versions", "aria-labelledby": "job-versions-h", "data-version": String(chosen) },
      el("h3", { id: "job-versions-h" }, "Config versions"),
      el("div", { class: "inline" }, field("Version", select), field("Compare with", compare)),
      actionButton("Roll back to version " + chosen, "Roll job " + id + " back to config version " + chosen + "? (an update to that spec)",
        () => post("jobs/" + enc(id) + "/rollback", { version: chosen }),
        Object.assign({ id: "rollback-job" }, chosen === desired ? { disabled: true, title: "this is the desired version" } : can)),
      pre);
    const redraw = (focus) => () => {
      chosen = Number(select.value);
      against = Number(compare.value);
      section.replaceWith(versionsSection(status, can));
      document.getElementById(focus).focus();
    };
    select.addEventListener("change", redraw("version-select"));
    compare.addEventListener("change", redraw("version-compare"));
    const shown = chosen;
    const base = against;
    Promise.all([yamlOf(shown), base ? yamlOf(base) : Promise.resolve(null)]).then(([text, old]) => {
      if (chosen !== shown || against !== base) return;
      pre.replaceChildren(...(old === null ? [text] : lineDiff(old, text)));
    }).catch(showError);
    return section;
  }

  async function refresh() {
    const one = await api("jobs/" + enc(id));
    // Further pages the reader asked for ("Show more tasks").
    let tasks = one.tasks || [];
    let next = one.tasks_next_offset;
    for (let p = 1; p < taskPages && next !== null && next !== undefined; p++) {
      const more = await api("jobs/" + enc(id) + "?tasks_offset=" + next);
      tasks = tasks.concat(more.tasks || []);
      next = more.tasks_next_offset;
    }
    const job = one.job || {};
    const s = job.spec || {};
    const status = job.status || {};
    spec = one.spec_yaml || "";
    const pool = s.pool || "";
    const state = short(status.state, "JOB_STATE_");
    const counts = Object.entries(status.task_counts || {}).map(([k, v]) => k + " " + v).join(", ");
    const can = allowed(me, pool);
    const scale = el("input", { id: "scale-count", type: "number", min: "0", value: String(num(s.instance_count)) });
    const actions = el("section", { "aria-labelledby": "job-actions-h", class: "actions" },
      el("h3", { id: "job-actions-h" }, "Actions"),
      actionButton("Kill", "Kill every task of job " + id + "?", () => post("jobs/" + enc(id) + "/kill"), Object.assign({ id: "kill-job" }, can)),
      actionButton("Restart", "Restart every task of job " + id + "?", () => post("jobs/" + enc(id) + "/restart"), Object.assign({ id: "restart-job" }, can)),
      el("span", { class: "inline" }, field("Instances", Object.assign(scale, can.disabled ? { disabled: true } : {})),
        actionButton("Scale", "Change job " + id + "'s instance count?", () => post("jobs/" + enc(id) + "/scale", { instances: Number(scale.value) }),
          Object.assign({ id: "scale-job" }, can))));
    const parts = [
      facts([
        ["State", el("span", { id: "job-state", "data-state": state }, state)],
        ["Name", s.name], ["Owner", s.owner], ["Pool", link("/pools" + pool, pool)],
        ["Kind", short(s.kind, "JOB_KIND_")], ["Instances", String(num(s.instance_count))],
        ["Tasks", counts],
        ["Config version", String(num(status.config_version)) + (num(status.desired_config_version) > num(status.config_version) ? " (updating to " + num(status.desired_config_version) + ")" : "")],
        ["Created", when(status.created_at_ms)], ["Completed", when(status.completed_at_ms)],
        ["Message", status.message || ""],
      ]),
    ];
    const pending = [status.pending_summary || ""].concat(status.warnings || []).filter(Boolean).join(" · ");
    if (pending) parts.push(el("p", { id: "job-pending", class: "reason" }, pending));
    parts.push(actions);
    const u = job.update;
    if (u && u.id) {
      const ustate = short(u.state, "UPDATE_STATE_");
      const control = (verb, label) => actionButton(label, label + " update " + u.id + " of job " + id + "?",
        () => post("jobs/" + enc(id) + "/" + verb), Object.assign({ "data-update-action": verb }, can));
      parts.push(el("section", { id: "job-update", "aria-labelledby": "job-update-h", "data-update-state": ustate },
        el("h3", { id: "job-update-h" }, "Update " + u.id),
        facts([["State", ustate], ["Versions", num(u.from_config_version) + " → " + num(u.to_config_version)],
          ["Done", (u.done || []).length + " instances"], ["In progress", (u.in_progress || []).join(", ")],
          ["Failed", (u.failed || []).join(", ")], ["Message", u.message || ""]]),
        el("progress", { max: String(num(s.instance_count) || 1), value: String((u.done || []).length), "aria-label": "instances updated" }),
        control("pause", "Pause"), control("resume", "Resume"), control("abort", "Abort")));
    }
    parts.push(table("tasks-table", "Tasks", ["Instance", "State", "Host", "Run", "Config", "Used / reserved", "Waits for", "Reason"],
      tasks.map((t) => {
        const st = short(t.state, "TASK_STATE_");
        return el("tr", { "data-instance": String(t.instance || 0), "data-state": st },
          el("td", {}, link("/jobs/" + enc(id) + "/tasks/" + (t.instance || 0), "task " + (t.instance || 0))),
          el("td", {}, st), el("td", {}, t.host ? link("/hosts/" + enc(t.host), t.host) : ""),
          el("td", {}, t.run_id || ""), el("td", {}, String(num(t.config_version))),
          el("td", { class: "usage" }, taskUsageShort(t)),
          el("td", { "data-pending-kind": t.pending_kind || "" }, (t.pending_kind || "").replace(/_/g, " ")),
          el("td", { class: "reason" }, t.pending_reason || t.reason || t.message || ""));
      })));
    const total = num(one.tasks_total);
    if (next !== null && next !== undefined) {
      parts.push(el("p", { id: "tasks-more", "data-shown": String(tasks.length), "data-total": String(total) },
        "Showing " + tasks.length + " of " + total + " tasks. ",
        el("button", { type: "button", id: "tasks-more-button", onclick: () => { taskPages += 1; refresh().catch(showError); } },
          "Show more tasks")));
    }
    const events = (one.events || []).map((e) => el("tr", { "data-reason": e.reason || "", "data-count": String(e.count || 1) },
      el("td", {}, when(e.last_seen_ms)), el("td", {}, short(e.type, "EVENT_TYPE_")), el("td", {}, e.reason || ""),
      el("td", {}, e.count || "1"), el("td", {}, e.instance === undefined ? "job" : "task " + e.instance),
      el("td", { class: "reason" }, e.message || "")));
    parts.push(table("events-table", "Events (newest first)", ["Last seen", "Type", "Reason", "Count", "Object", "Message"], events));
    parts.push(versionsSection(status, can));
    parts.push(el("section", { "aria-labelledby": "spec-h" }, el("h3", { id: "spec-h" }, "Spec"),
      el("pre", { id: "job-spec", tabIndex: 0, role: "region", "aria-label": "job spec (YAML)" }, spec),
      el("button", { type: "button", onclick: () => { sessionStorage.setItem("paceline-draft", spec); go("/submit"); } }, "Submit a copy")));
    body.replaceChildren(...parts);
  }

  return {
    refresh,
    wants: (raw) => {
      const ev = eventOf(raw);
      return (ev.job && ev.job.id === id) || (ev.task && ev.task.job_id === id);
    },
  };
}

// A task's runs from its transitions: run, host, when it began, how it ended
// (the current run's state is the task's: transitions in one millisecond
// have no order to trust).
function runsOf(events, task) {
  const runs = new Map();
  for (const e of events) {
    const run = num(e.run);
    if (!run) continue;
    const r = runs.get(run) || { run, host: "", started: 0, state: "", reason: "", message: "" };
    r.host = e.host || r.host;
    r.started = r.started || num(e.at_ms);
    r.state = short(e.to, "TASK_STATE_");
    r.reason = e.reason || r.reason;
    r.message = e.message || r.message;
    runs.set(run, r);
  }
  const current = runs.get(num(task.run));
  if (current) current.state = short(task.state, "TASK_STATE_");
  return [...runs.values()].sort((a, b) => b.run - a.run);
}

export function taskPage(view, [id, instance], _query, { me }) {
  const body = el("div", { id: "task-detail", "data-job-id": id, "data-instance": instance });
  const streamSelect = el("select", { id: "log-stream" }, el("option", { value: "stdout" }, "stdout"), el("option", { value: "stderr" }, "stderr"));
  const logState = el("span", { id: "log-state", role: "status" }, "");
  // role=log: a region whose new lines are announced politely.
  const log = el("pre", { id: "log", tabIndex: 0, role: "log", "aria-label": "task log" });
  view.append(el("p", { class: "crumbs" }, link("/jobs", "Jobs"), " / ", link("/jobs/" + enc(id), id), " / task " + instance),
    el("h2", {}, "Task " + id + "-" + instance), body,
    el("section", { "aria-labelledby": "log-h" }, el("h3", { id: "log-h" }, "Log"),
      el("div", { class: "inline" }, field("Stream", streamSelect), logState), log));

  let controller = null;
  let streamingRun = -1;
  function openLog(run) {
    if (controller) controller.abort();
    streamingRun = run;
    log.textContent = "";
    logState.textContent = "following";
    logState.dataset.state = "following";
    controller = streamLog(id, instance, streamSelect.value, (text) => { log.textContent += text; log.dataset.bytes = String(log.textContent.length); },
      (error) => {
        logState.dataset.state = error ? "error" : "ended";
        logState.textContent = error ? "log: " + error.message : "the run ended; log complete";
      });
  }
  streamSelect.addEventListener("change", () => openLog(streamingRun));

  async function refresh() {
    const one = await api("tasks/" + enc(id) + "/" + instance);
    const t = one.task || {};
    const job = await api("jobs/" + enc(id));
    const pool = ((job.job || {}).spec || {}).pool || "";
    const can = allowed(me, pool);
    const st = short(t.state, "TASK_STATE_");
    const events = one.events || [];
    body.replaceChildren(
      facts([["State", el("span", { id: "task-state", "data-state": st }, st)],
        ["Host", t.host ? link("/hosts/" + enc(t.host), t.host) : ""], ["GPU", el("span", { id: "task-gpu" }, taskGpu(t)) ],
        ["Used / reserved", el("span", { id: "task-usage", "data-measured": t.usage ? "true" : "false" }, taskUsage(t))],
        ["Run", String(num(t.run))], ["Run id", t.run_id || ""],
        ["Config version", String(num(t.config_version))], ["Failures", String(num(t.failure_count))],
        ["Healthy", t.healthy === undefined ? "" : String(t.healthy)],
        ["Started", when(t.started_at_ms)], ["Ended", when(t.completed_at_ms)],
        ["Exit status / reason", [t.reason, t.message].filter(Boolean).join(": ")],
        ["Waits for", [t.pending_kind, t.pending_reason].filter(Boolean).join(": ")]]),
      el("section", { class: "actions", "aria-labelledby": "task-actions-h" }, el("h3", { id: "task-actions-h" }, "Actions"),
        actionButton("Kill task", "Kill task " + instance + " of " + id + "?", () => post("tasks/" + enc(id) + "/" + instance + "/kill"), Object.assign({ id: "kill-task" }, can)),
        actionButton("Restart task", "Restart task " + instance + " of " + id + "?", () => post("tasks/" + enc(id) + "/" + instance + "/restart"), Object.assign({ id: "restart-task" }, can))),
      table("runs-table", "Runs", ["Run", "Host", "Began", "Last state", "Reason", "Message"], runsOf(events, t).map((r) =>
        el("tr", { "data-run": String(r.run) }, el("td", {}, String(r.run)), el("td", {}, r.host), el("td", {}, when(r.started)),
          el("td", {}, r.state), el("td", {}, r.reason), el("td", { class: "reason" }, r.message)))),
      table("task-events", "Timeline (oldest first)", ["Time", "Run", "Transition", "Host", "Reason", "Message"],
        events.map((e) => el("tr", { "data-reason": e.reason || "" }, el("td", {}, when(e.at_ms)), el("td", {}, String(num(e.run))),
          el("td", {}, short(e.from, "TASK_STATE_") + " → " + short(e.to, "TASK_STATE_")), el("td", {}, e.host || ""),
          el("td", {}, e.reason || ""), el("td", { class: "reason" }, e.message || "")))));
    // A new run has a new log: follow it.
    if (num(t.run) > 0 && num(t.run) !== streamingRun) openLog(num(t.run));
    if (num(t.run) === 0 && streamingRun < 0) logState.textContent = "no run yet: the task has not been placed";
    measuredAt = num((t.usage || {}).sampled_at_ms);
  }

  // Measured use changes without a task event: while there is a figure,
  // read the task again every 5 s so that it stays current.
  let measuredAt = 0;
  const poll = setInterval(() => { if (measuredAt) refresh().catch(() => {}); }, 5000);

  return {
    refresh,
    wants: (raw) => {
      const ev = eventOf(raw);
      return !!ev.task && ev.task.job_id === id && String(ev.task.instance || 0) === String(instance);
    },
    unmount: () => {
      clearInterval(poll);
      if (controller) controller.abort();
    },
  };
}

const TEMPLATE = `# A job file, as \`paceline job create\` reads it (docs/user-guide.md).
name: hello
pool: /default
kind: batch
instance_count: 1
default_task:
  command: sh
  args: ["-c", "echo hello from $PACELINE_TASK_ID"]
  resources: {cpu_millis: 100, memory_mib: 32, disk_mib: 10, gpus: 0, ports: 0}
`;

export function submitPage(view, _params, _query, { go }) {
  const text = el("textarea", { id: "job-yaml", rows: 18, "aria-describedby": "yaml-help yaml-error" });
  text.setAttribute("spellcheck", "false");
  text.value = sessionStorage.getItem("paceline-draft") || TEMPLATE;
  sessionStorage.removeItem("paceline-draft");
  const error = el("p", { id: "yaml-error", class: "field-error", hidden: true });
  const result = el("p", { id: "submit-result", role: "status" });

  function showAt(e) {
    const line = num(e.body && e.body.line);
    text.setAttribute("aria-invalid", "true");
    error.hidden = false;
    error.dataset.line = String(line);
    error.textContent = (line ? "Line " + line + ": " : "") + e.message;
    // Put the cursor on the offending line.
    if (line) {
      const lines = text.value.split("\n");
      const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
      text.focus();
      text.setSelectionRange(start, start + (lines[line - 1] || "").length);
    }
  }
  function clear() {
    text.removeAttribute("aria-invalid");
    error.hidden = true;
    error.textContent = "";
  }
  async function check() {
    try {
      const ok = await postText("jobs/validate", text.value);
      clear();
      return ok;
    } catch (e) {
      if (e.status === 400) showAt(e); else showError(e);
      return null;
    }
  }
  const form = el("form", { id: "submit-form", "aria-labelledby": "submit-h" },
    el("label", { for: "job-yaml" }, "Job file (YAML)"),
    el("p", { id: "yaml-help", class: "help" }, "Checked by the server before it is sent; a mistake is shown under the field with its line."),
    text, error,
    el("div", { class: "inline" },
      el("button", { type: "button", id: "check-job", onclick: async () => { if (await check()) result.textContent = "The job file is valid."; } }, "Check"),
      el("button", { type: "submit", id: "submit-job" }, "Submit")),
    result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const ok = await check();
    if (!ok) return;
    if (!window.confirm("Submit job " + ok.name + " (" + ok.instances + " instances) to pool " + ok.pool + "?")) return;
    try {
      const created = await postText("jobs", text.value);
      showError(null);
      result.textContent = "Created " + created.id;
      go("/jobs/" + enc(created.id));
    } catch (e) {
      if (e.status === 400) showAt(e); else showError(e);
    }
  });
  view.append(el("h2", { id: "submit-h" }, "Submit a job"), form);
  return { refresh: async () => {}, wants: () => false };
}

// The lines of `before` and `after` as one listing: kept lines as they are,
// removed ones marked "- ", added ones "+ " (a longest common subsequence of
// lines; specs are short).
function lineDiff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  const common = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      common[i][j] = a[i] === b[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const out = [];
  const line = (cls, mark, text) => out.push(el("span", { class: cls }, mark + text + "\n"));
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      line("same", "  ", a[i]);
      i++;
      j++;
    } else if (j < b.length && (i === a.length || common[i][j + 1] >= common[i + 1][j])) {
      line("added", "+ ", b[j++]);
    } else {
      line("removed", "- ", a[i++]);
    }
  }
  return out;
}
