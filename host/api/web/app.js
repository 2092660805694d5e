// The Paceline web UI: plain ES modules over the API process's JSON routes
// (/ui/api/...), no framework and no build step (decision 0031).
//
// Every view has an address (hash routes, so a reload or a shared link
// opens the same view with no server routing): #/jobs?state=RUNNING,
// #/jobs/ID, #/jobs/ID/tasks/N, #/submit, #/pools, #/pools/team/a,
// #/hosts, #/hosts/NAME, #/plugins, #/plugins/placement/batch, #/audit.
//
// The page follows the cluster through the server's change stream
// (/ui/api/events, Server-Sent Events): a change that concerns the view
// on screen re-reads its data; nothing polls.
import { follow, setToken, token, whoami } from "./api.js";
import { el, showError } from "./dom.js";
import * as lists from "./lists.js";
import * as job from "./job.js";
import * as cluster from "./cluster.js";

// For tests and the curious: what the page has done since it loaded.
const stats = { loaded: Date.now(), events: 0, refreshes: 0, resets: 0, live: "connecting" };
window.paceline = stats;

// [pattern, section, mount]; patterns match the hash path's segments.
const ROUTES = [
  [/^\/?$/, "jobs", lists.jobs],
  [/^\/jobs$/, "jobs", lists.jobs],
  [/^\/jobs\/([^/]+)$/, "jobs", job.jobPage],
  [/^\/jobs\/([^/]+)\/tasks\/(\d+)$/, "jobs", job.taskPage],
  [/^\/submit$/, "submit", job.submitPage],
  [/^\/pools$/, "pools", cluster.pools],
  [/^\/pools(\/.+)$/, "pools", cluster.poolPage],
  [/^\/hosts$/, "hosts", cluster.hosts],
  [/^\/hosts\/([^/]+)$/, "hosts", cluster.hostPage],
  [/^\/plugins$/, "plugins", cluster.plugins],
  [/^\/plugins\/(.+)$/, "plugins", cluster.pluginPage],
  [/^\/audit$/, "audit", cluster.audit],
  [/^\/simulate$/, "simulate", cluster.simulate],
  [/^\/simulate\/([^/]+)$/, "simulate", cluster.simReport],
];

function parseHash() {
  const raw = window.location.hash.replace(/^#/, "");
  const [path, search] = raw.split("?");
  return { path: path || "/", query: new URLSearchParams(search || "") };
}

let current = null;
let refreshing = null;
let again = false;

async function refresh() {
  if (!current) return;
  if (refreshing) {
    again = true;
    return refreshing;
  }
  const page = current;
  refreshing = (async () => {
    try {
      await page.refresh();
      if (page === current) showError(null);
    } catch (e) {
      if (page === current) showError(e);
    }
    stats.refreshes += 1;
    document.body.setAttribute("data-rendered", String(Date.now()));
  })();
  await refreshing;
  refreshing = null;
  if (again) {
    again = false;
    await refresh();
  }
}

// Many changes arrive together (a job's tasks all start): one re-read for
// each burst, at most every 300 ms.
let timer = null;
function soon() {
  if (timer) return;
  timer = setTimeout(() => { timer = null; refresh(); }, 300);
}

async function navigate(focus) {
  const { path, query } = parseHash();
  if (current && current.unmount) current.unmount();
  current = null;
  const view = document.getElementById("view");
  view.replaceChildren();
  const found = ROUTES.map(([re, section, mount]) => [path.match(re), section, mount]).find(([m]) => m);
  if (!found) {
    view.append(el("h2", {}, "Not found"), el("p", {}, "No page at " + path + ". "), el("a", { href: "#/jobs" }, "Jobs"));
    return;
  }
  const [match, section, mount] = found;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.section === section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.body.dataset.section = section;
  const me = await whoami();
  current = mount(view, match.slice(1).map(decodeURIComponent), query, { me, refresh, go });
  await refresh();
  // Which view is on screen, once it has its data (tests wait for this).
  document.body.dataset.view = window.location.hash || "#/";
  // Move the reader to the new view (not on the first load: the address bar keeps it).
  if (focus) view.focus({ preventScroll: true });
}

// Opens a route (pushing a history entry, so Back returns here).
function go(route) {
  window.location.hash = route;
}

window.addEventListener("hashchange", () => navigate(true));
document.addEventListener("paceline:changed", () => soon());

function showPrincipal(me) {
  const p = document.getElementById("principal");
  if (!me) {
    p.textContent = "not signed in";
    p.dataset.name = "";
    p.dataset.role = "";
    return;
  }
  p.dataset.name = me.name;
  p.dataset.role = me.role;
  const pools = me.role === "user" || me.role === "author" ? " · " + ((me.pools || []).join(", ") || "no pools") : "";
  p.textContent = "Signed in as " + me.name + " (" + me.role + pools + ")" + (me.tokens_required ? "" : " · open server");
}

const LIVE_TEXT = {
  live: "live",
  reconnecting: "connection lost, reconnecting…",
  offline: "not following (sign in)",
  connecting: "connecting…",
};

function liveState(state, why) {
  stats.live = state;
  const p = document.getElementById("live");
  p.dataset.live = state;
  p.textContent = LIVE_TEXT[state] || state;
  p.title = why || "";
}

let stream = null;
function startStream() {
  if (stream) stream.stop();
  stream = follow({
    onChange(ev) {
      stats.events += 1;
      if (current && current.wants && current.wants(ev)) soon();
    },
    onState(state, why) {
      // Back after a gap: what changed meanwhile may be past the stream's memory.
      if (state === "live" && stats.live === "reconnecting") soon();
      liveState(state, why);
    },
    onReset() {
      stats.resets += 1;
      soon();
    },
  });
}

// The skip link moves the focus without touching the address (which holds the route).
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  document.getElementById("view").focus();
});

document.getElementById("token").value = token();
document.getElementById("token-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  setToken(document.getElementById("token").value);
  showPrincipal(await whoami(true));
  startStream();
  navigate(false);
});

(async () => {
  showPrincipal(await whoami(true));
  startStream();
  await navigate(false);
})();
