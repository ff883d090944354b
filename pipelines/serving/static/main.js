// The explorer's entry point: views routed by the URL's query string, sign-in, error messages.
import { Unauthorized, clearToken, setToken, token } from "./api.js";
import { showActivity, showActor } from "./activity.js";
import { byId, showMessage } from "./dom.js";
import { exportCsv, fillForm, loadMore, readForm, runSearch } from "./search.js";
import { compare, showTimeline } from "./timeline.js";
import { FIELDS as IMPACT_FIELDS, showImpact } from "./impact.js";
import { FIELDS as CHANGE_FIELDS, downloadReport, exportChanges, moreChanges, runChanges } from "./changes.js";

const VIEWS = ["search", "changes", "timeline", "activity", "actor", "impact"];

function currentQuery() {
  return Object.fromEntries(new URLSearchParams(window.location.search).entries());
}

function navigate(query) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value) params.set(key, value);
  window.history.pushState(null, "", `?${params}`);
  return route();
}

const open = {
  actor: (actor) => navigate({ view: "actor", actor, since: byId("a-since").value, until: byId("a-until").value }),
  timeline: (urn) => navigate({ view: "timeline", urn }),
  impact: (query) => navigate({ ...query, view: "impact" }),
};

function showView(name) {
  for (const view of VIEWS) byId(`view-${view}`).hidden = view !== name;
  byId("signin").hidden = true;
  byId("views").hidden = false;
  for (const button of document.querySelectorAll("nav [data-view]")) {
    button.setAttribute("aria-current", button.dataset.view === name || (name === "actor" && button.dataset.view === "activity") ? "page" : "false");
  }
}

function signIn(reason) {
  for (const view of VIEWS) byId(`view-${view}`).hidden = true;
  // Nothing to navigate to, nor to sign out of, before a token is given.
  byId("views").hidden = true;
  byId("signin").hidden = false;
  byId("signin-reason").textContent = reason;
  byId("token").focus();
}

async function guarded(work) {
  showMessage("");
  try {
    await work();
  } catch (error) {
    if (error instanceof Unauthorized) signIn(`Sign in again: ${error.message}.`);
    else showMessage(`Error: ${error.message}`);
  }
}

async function route() {
  if (!token()) {
    signIn("Paste an access token with the audit-read role (create one with lakehouse token create).");
    document.body.dataset.ready = String(Date.now());
    return;
  }
  const query = currentQuery();
  const view = VIEWS.includes(query.view) ? query.view : "search";
  showView(view);
  document.body.dataset.view = view;
  await guarded(async () => {
    if (view === "search") {
      fillForm(query);
      await runSearch(query);
    } else if (view === "changes") {
      const form = byId("changes-form");
      for (const name of CHANGE_FIELDS) if (query[name] !== undefined) form.elements[name].value = query[name];
      await runChanges(query);
    } else if (view === "timeline") {
      byId("t-urn").value = query.urn || "";
      if (query.urn) {
        const times = await showTimeline(query.urn);
        if (query.a && query.b && times.length) {
          byId("asof-a").value = query.a;
          byId("asof-b").value = query.b;
          await compare(query.urn, query.a, query.b);
        }
      }
    } else if (view === "activity") {
      byId("a-since").value = query.since || "";
      byId("a-until").value = query.until || "";
      await showActivity(query, open);
    } else if (view === "impact") {
      const form = byId("impact-form");
      for (const name of IMPACT_FIELDS) form.elements[name].value = query[name] ?? (name === "direction" ? "upstream" : name === "depth" ? "3" : "");
      await showImpact(query, open);
    } else {
      await showActor(query.actor || "", query, open);
    }
  });
  document.body.dataset.ready = String(Date.now());
}

function bind() {
  byId("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(byId("token").value.trim());
    byId("token").value = "";
    route();
  });
  byId("sign-out").addEventListener("click", () => {
    clearToken();
    route();
  });
  for (const button of document.querySelectorAll("nav [data-view]")) {
    button.addEventListener("click", () => navigate({ view: button.dataset.view }));
  }
  byId("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    navigate({ view: "search", ...readForm() });
  });
  byId("load-more").addEventListener("click", () => guarded(loadMore));
  byId("changes-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = byId("changes-form");
    const query = { view: "changes" };
    for (const name of CHANGE_FIELDS) query[name] = form.elements[name].value.trim();
    navigate(query);
  });
  byId("changes-more").addEventListener("click", () => guarded(moreChanges));
  byId("changes-csv").addEventListener("click", exportChanges);
  byId("changes-report").addEventListener("click", () => guarded(async () => {
    const form = byId("changes-form");
    const query = {};
    for (const name of CHANGE_FIELDS) query[name] = form.elements[name].value.trim();
    byId("report-status").textContent = "Preparing the report…";
    try {
      byId("report-status").textContent = `Downloaded ${await downloadReport(query, byId("report-format").value)}`;
    } catch (error) {
      byId("report-status").textContent = "";
      throw error;
    }
  }));
  byId("export-csv").addEventListener("click", exportCsv);
  byId("timeline-form").addEventListener("submit", (event) => {
    event.preventDefault();
    navigate({ view: "timeline", urn: byId("t-urn").value.trim() });
  });
  byId("asof-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const urn = currentQuery().urn;
    navigate({ view: "timeline", urn, a: byId("asof-a").value, b: byId("asof-b").value });
  });
  byId("impact-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = byId("impact-form");
    const query = { view: "impact" };
    for (const name of IMPACT_FIELDS) query[name] = form.elements[name].value.trim();
    navigate(query);
  });
  byId("activity-form").addEventListener("submit", (event) => {
    event.preventDefault();
    navigate({ view: "activity", since: byId("a-since").value, until: byId("a-until").value });
  });
  window.addEventListener("popstate", route);
}

bind();
route();
