// Small DOM helpers shared by the pages. Text is always set as text
// (never parsed as HTML), so names and messages from the cluster cannot
// inject markup.

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" || k === "for" || k === "style" || k === "scope") e.setAttribute(k, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e[k] = v;
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// A link to a page of the UI (hash routes: #/jobs/ID).
export function link(route, text, attrs = {}) {
  return el("a", Object.assign({ href: "#" + route }, attrs), text);
}

// Enum names without their prefix: TASK_STATE_RUNNING -> RUNNING.
export function short(name, prefix) {
  return String(name || "").replace(prefix, "");
}

// 64-bit integers arrive as strings in the proto3 JSON mapping; missing ones are 0.
export function num(v) {
  return Number(v || 0);
}

// GPU of a resource amount (`Resources` or a pool's `PerKind`) in GPUs: from
// `gpu_milli` (1000 a device), or the whole devices of `gpus` / `gpu` where
// an older server sends no milli; a share shows as a fraction ("0.5").
export function gpus(o) {
  const r = o || {};
  const milli = num(r.gpu_milli) || num(r.gpus !== undefined ? r.gpus : r.gpu) * 1000;
  return milli / 1000;
}

// A task's GPU devices: "0.5 GPU on device 1", "2 GPUs on devices 0,1"; ""
// when it holds none. Device indices where the server knows the host's
// devices, else positions in its device list.
export function taskGpu(t) {
  const g = (t || {}).gpu || {};
  const devices = g.devices || [];
  if (devices.length === 0) return "";
  const amount = (num(g.milli_each) * devices.length) / 1000;
  const indices = (t.gpu_device_indices || []).length === devices.length;
  const list = (indices ? t.gpu_device_indices : devices).join(",");
  return amount + (amount > 1 ? " GPUs" : " GPU") + " on " + (indices ? "device" : "device position") +
    (devices.length > 1 ? "s " : " ") + list;
}

// What a task's current run uses beside what it reserved: "cpu 980 of 1000
// millicores, memory 201 of 256 MiB"; what it reserved alone when nothing
// was measured (simulated or Mesos hosts, the first seconds of a run); ""
// when its run holds nothing.
export function taskUsage(t) {
  const r = (t || {}).reserved;
  const u = (t || {}).usage;
  if (u) {
    return "cpu " + num(u.cpu_millis) + " of " + num((r || {}).cpu_millis) + " millicores, memory " +
      num(u.memory_mib) + " of " + num((r || {}).memory_mib) + " MiB";
  }
  if (r) return "reserved cpu " + num(r.cpu_millis) + " millicores, memory " + num(r.memory_mib) + " MiB (use not measured)";
  return "";
}

// The same for a table cell: "980/1000m 201/256Mi"; "" when not measured.
export function taskUsageShort(t) {
  const u = (t || {}).usage;
  if (!u) return "";
  const r = (t || {}).reserved || {};
  return num(u.cpu_millis) + "/" + num(r.cpu_millis) + "m " + num(u.memory_mib) + "/" + num(r.memory_mib) + "Mi";
}

export function pct(part, whole) {
  return whole > 0 ? Math.min(100, (100 * part) / whole) : 0;
}

export function when(ms) {
  const n = num(ms);
  return n ? new Date(n).toISOString().replace("T", " ").slice(0, 19) : "";
}

// A table with a caption (read by screen readers), column headers and rows.
export function table(id, caption, columns, rows, attrs = {}) {
  return el("table", Object.assign({ id: id || undefined }, attrs),
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { scope: "col" }, c)))),
    el("tbody", {}, rows));
}

// A labelled form control: <label> and the control, associated by id.
export function field(label, control) {
  return el("div", { class: "field" }, el("label", { for: control.id }, label), control);
}

// Key/value lines (dl) for a record's fields.
export function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.filter(([, v]) => v !== undefined && v !== "")
    .map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

// The page-wide error line; refusals say how to fix them.
export function showError(error) {
  const p = document.getElementById("error");
  if (!error) {
    p.hidden = true;
    p.textContent = "";
    return;
  }
  p.hidden = false;
  const refused = error.status === 401 || error.status === 403;
  p.textContent = refused
    ? "Not allowed: " + error.message + (error.status === 401 ? " (enter a token above)" : "")
    : "Error: " + error.message;
}

// Asks before a change; every action on the page goes through here.
export function confirmed(question) {
  return window.confirm(question);
}

// A button that runs `action` after confirmation, showing its error.
export function actionButton(label, question, action, attrs = {}) {
  return el("button", Object.assign({ type: "button" }, attrs, {
    onclick: async (event) => {
      if (!confirmed(question)) return;
      const button = event.currentTarget;
      button.disabled = true;
      try {
        await action();
        showError(null);
        // The page re-reads what it shows (host and plugin changes are not in the change stream).
        document.dispatchEvent(new Event("paceline:changed"));
      } catch (e) {
        showError(e);
      } finally {
        button.disabled = false;
      }
    },
  }), label);
}
