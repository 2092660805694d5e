// The jobs list: filters and search in the address (#/jobs?state=RUNNING&pool=/team&q=web),
// server-side pages of 100 (QueryJobs' page token), sorting within the page.
import { api } from "./api.js";
import { el, field, link, num, short, table } from "./dom.js";

const STATES = ["", "PENDING", "INITIALIZED", "RUNNING", "SUCCEEDED", "FAILED", "KILLING", "KILLED", "DELETED"];
const KINDS = ["", "BATCH", "STATELESS", "STATEFUL", "DAEMON"];
const PAGE = 100;
const COLUMNS = [["id", "Job"], ["name", "Name"], ["kind", "Kind"], ["pool", "Pool"], ["owner", "Owner"], ["state", "State"], ["tasks", "Tasks"]];

function row(job) {
  const spec = job.spec || {};
  const status = job.status || {};
  return {
    id: job.id,
    name: spec.name || "",
    kind: short(spec.kind, "JOB_KIND_"),
    pool: spec.pool || "",
    owner: spec.owner || "",
    state: short(status.state, "JOB_STATE_"),
    labels: spec.labels || {},
    tasks: Object.entries(status.task_counts || {}).map(([k, v]) => k + "=" + v).join(" "),
  };
}

function select(id, options, value) {
  return el("select", { id, name: id }, options.map((o) => el("option", { value: o, selected: o === value }, o || "any")));
}

// Page tokens of the pages before this one, for "Previous" (kept while the page is open).
const previous = [];

export function jobs(view, _params, query, { go }) {
  const q = (k) => query.get(k) || "";
  const form = el("form", { id: "job-filters", class: "filters", "aria-label": "Filter jobs" },
    field("State", select("f-state", STATES, q("state"))),
    field("Kind", select("f-kind", KINDS, q("kind"))),
    field("Pool", el("input", { id: "f-pool", value: q("pool"), placeholder: "/team" })),
    field("Owner", el("input", { id: "f-owner", value: q("owner") })),
    field("Label", el("input", { id: "f-label", value: q("label"), placeholder: "key=value" })),
    field("Name contains", el("input", { id: "f-q", type: "search", value: q("q") })),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const [key, id] of [["state", "f-state"], ["kind", "f-kind"], ["pool", "f-pool"], ["owner", "f-owner"], ["label", "f-label"], ["q", "f-q"]]) {
      const v = document.getElementById(id).value.trim();
      if (v) next.set(key, v);
    }
    if (q("sort")) next.set("sort", q("sort"));
    previous.length = 0;
    go("/jobs?" + next.toString());
  });
  const summary = el("p", { id: "jobs-summary", role: "status" });
  const holder = el("div", { class: "scroll" });
  const pager = el("nav", { class: "pager", "aria-label": "Pages of jobs" });
  view.append(el("h2", {}, "Jobs"), form, summary, holder, pager);

  const sort = q("sort") || "";
  const [sortKey, sortDir] = sort.startsWith("-") ? [sort.slice(1), -1] : [sort, 1];

  function sortLink(key, label) {
    const next = new URLSearchParams(query);
    next.set("sort", sortKey === key && sortDir === 1 ? "-" + key : key);
    const marker = sortKey === key ? (sortDir === 1 ? " ▲" : " ▼") : "";
    return link("/jobs?" + next.toString(), label + marker, { "data-sort": key });
  }

  // State, pool and owner are filters of the store; name, kind and label
  // apply to the jobs read. With any of those, store pages are read (1,000
  // at a time) until 100 match or none are left, so a match on a later
  // page is found; the next page starts where the reading stopped.
  async function read() {
    const local = q("q") || q("kind") || q("label");
    const [k, v] = q("label").split("=");
    const keep = (r) => (!q("kind") || r.kind === q("kind"))
      && (!q("label") || (k in r.labels && (v === undefined || r.labels[k] === v)));
    let rows = [];
    let token = q("page");
    for (let pages = 0; ; pages++) {
      const params = new URLSearchParams({ limit: String(local ? 1000 : PAGE) });
      for (const [key, name] of [["state", "state"], ["pool", "pool"], ["owner", "owner"], ["q", "name_contains"]]) {
        if (q(key)) params.set(name, q(key));
      }
      if (token) params.set("page_token", token);
      const body = await api("jobs?" + params.toString());
      rows = rows.concat((body.jobs || []).map(row).filter(keep));
      token = body.next_page_token || "";
      if (!local || !token || rows.length >= PAGE || pages >= 20) return { rows, next: token };
    }
  }

  async function refresh() {
    const { rows, next } = await read();
    const body = { next_page_token: next };
    if (sortKey) {
      rows.sort((a, b) => (a[sortKey] < b[sortKey] ? -1 : a[sortKey] > b[sortKey] ? 1 : 0) * sortDir);
    }
    const headers = COLUMNS.map(([key, label]) => sortLink(key, label));
    const t = table("jobs-table", "Jobs" + (q("page") ? " (a later page)" : ""), headers, rows.map((r) =>
      el("tr", { "data-job-id": r.id, "data-state": r.state },
        el("td", {}, link("/jobs/" + encodeURIComponent(r.id), r.id)), el("td", {}, r.name), el("td", {}, r.kind),
        el("td", {}, link("/pools" + r.pool, r.pool)), el("td", {}, r.owner), el("td", { class: "state" }, r.state),
        el("td", {}, r.tasks))));
    for (const th of t.querySelectorAll("th")) {
      const key = th.querySelector("a").dataset.sort;
      th.setAttribute("aria-sort", key === sortKey ? (sortDir === 1 ? "ascending" : "descending") : "none");
    }
    holder.replaceChildren(t);
    summary.textContent = rows.length + (rows.length === 1 ? " job shown" : " jobs shown") + (body.next_page_token ? " (more on the next page)" : "");
    pager.replaceChildren();
    if (q("page")) {
      pager.append(el("button", { type: "button", onclick: () => {
        const next = new URLSearchParams(query);
        const back = previous.pop();
        if (back) next.set("page", back); else next.delete("page");
        go("/jobs?" + next.toString());
      } }, "Previous page"));
    }
    if (body.next_page_token) {
      pager.append(el("button", { type: "button", id: "next-page", onclick: () => {
        const next = new URLSearchParams(query);
        previous.push(q("page"));
        next.set("page", body.next_page_token);
        go("/jobs?" + next.toString());
      } }, "Next page"));
    }
  }

  return { refresh, wants: (ev) => !!(ev.job || (ev.change && ev.change.job)) };
}

