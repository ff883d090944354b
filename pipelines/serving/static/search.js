// The search view: filters held in the URL, pages through scrollId, raw JSON rows, CSV export.
import { searchAudit } from "./api.js";
import { byId, clear, download, expandableRows, timeCell, toCsv } from "./dom.js";

const HOUR_MS = 3600 * 1000;
const PRESETS = { hour: HOUR_MS, day: 24 * HOUR_MS, week: 7 * 24 * HOUR_MS };
const FIELDS = ["actor", "entityType", "eventType", "aspect", "preset", "from", "to", "size"];
const CSV_COLUMNS = ["timeUtc", "actorUrn", "eventType", "aspectName", "entityUrn", "entityType", "summary"];

const state = { params: null, body: null, scrollId: null, events: [], total: 0 };

export function readForm() {
  const form = byId("search-form");
  const query = {};
  for (const name of FIELDS) {
    const value = form.elements[name].value.trim();
    if (value) query[name] = value;
  }
  return query;
}

export function fillForm(query) {
  const form = byId("search-form");
  for (const name of FIELDS) {
    if (query[name] !== undefined) form.elements[name].value = query[name];
  }
}

function windowOf(query, nowMs) {
  const preset = query.preset || "all";
  if (PRESETS[preset]) return { startTime: nowMs - PRESETS[preset], endTime: nowMs };
  if (preset === "custom") {
    const start = query.from ? new Date(query.from).getTime() : 0;
    const end = query.to ? new Date(query.to).getTime() : nowMs;
    if (Number.isNaN(start) || Number.isNaN(end)) throw new Error("From/To: not a date and time");
    if (start >= end) throw new Error("From: must be before To");
    return { startTime: start, endTime: end };
  }
  return { startTime: 0, endTime: nowMs };
}

function bodyOf(query) {
  const body = {};
  if (query.actor) body.actorUrns = [query.actor];
  if (query.entityType) body.entityTypes = [query.entityType];
  if (query.eventType) body.eventTypes = [query.eventType];
  if (query.aspect) body.aspectTypes = [query.aspect];
  return body;
}

// The last readable part of an urn: a dataset's name, a user's id (`urn:li:corpuser:mlee` -> `mlee`).
export function shortName(urn) {
  if (!urn) return "";
  const open = urn.indexOf("(");
  if (open < 0) return urn.slice(urn.lastIndexOf(":") + 1);
  const parts = [];
  let depth = 0;
  let start = open + 1;
  for (let i = open + 1; i < urn.length; i += 1) {
    if (urn[i] === "(") depth += 1;
    else if (urn[i] === ")" && depth > 0) depth -= 1;
    else if ((urn[i] === "," && depth === 0) || (urn[i] === ")" && depth === 0)) {
      parts.push(urn.slice(start, i));
      start = i + 1;
    }
  }
  // A dataset's key is (platform, name, origin), a schema field's (dataset, field): the name is second.
  return parts.length > 1 ? parts[1] : parts[0] || urn;
}

const VERBS = { Create: "created", Update: "updated", Delete: "deleted", Revoke: "revoked" };

// What happened, in words: "changed ownership of orders_9 (1 OWNER change)", "logged in via password".
export function summary(event) {
  const raw = event.rawUsageEvent || {};
  const entity = shortName(event.entityUrn);
  const type = (event.eventType || "").replace(/Event$/, "");
  let text;
  if (type === "UpdateAspect") text = `changed ${[event.aspectName, entity].filter(Boolean).join(" of ")}`;
  else if (type === "DeleteEntity") text = `deleted ${entity}`;
  else if (type === "Entity") text = `viewed ${entity}`;
  else if (type === "LogIn") text = "logged in";
  else if (type === "FailedLogIn") text = "failed to log in";
  else {
    const [, verb, object] = type.match(/^(Create|Update|Delete|Revoke)(.*)$/) || [null, null, type];
    const words = object.replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
    text = `${verb ? VERBS[verb] : "did"} ${words}${entity ? ` ${entity}` : ""}`;
  }
  if (event.loginSource || raw.loginSource) text += ` via ${event.loginSource || raw.loginSource}`;
  if (Array.isArray(raw.changeCategories) && raw.changeCount) {
    text += ` (${raw.changeCount} ${raw.changeCategories.join(", ")} change${raw.changeCount === 1 ? "" : "s"})`;
  }
  return text.length > 140 ? `${text.slice(0, 139)}…` : text;
}

function appendRows(events) {
  const body = byId("results").tBodies[0];
  for (const event of events) {
    const values = [timeCell(event.timestamp), event.actorUrn, event.eventType, event.aspectName ?? "",
      event.entityUrn ?? "", event.entityType ?? "", summary(event)];
    for (const tr of expandableRows(values, event.rawUsageEvent ?? event, 8)) body.appendChild(tr);
  }
}

async function fetchPage() {
  const params = { ...state.params, includeRaw: true };
  const firstPage = !state.scrollId;
  if (state.scrollId) params.scrollId = state.scrollId;
  const page = await searchAudit(params, state.body);
  // The first page counts the whole search; a later page's total may count only what is left after it.
  if (!state.scrollId) state.total = page.total;
  state.scrollId = page.nextScrollId || null;
  state.events.push(...page.usageEvents);
  appendRows(page.usageEvents);
  byId("search-total").textContent = `${state.total} matching events, ${state.events.length} shown`;
  byId("load-more").hidden = !state.scrollId;
  byId("export-csv").disabled = state.events.length === 0;
  // The frame after the first rows are in the DOM: when they are painted (read by `lakehouse bench explorer`).
  if (firstPage) requestAnimationFrame(() => performance.mark("lakehouse:first-results"));
}

export async function runSearch(query) {
  const size = query.size || "50";
  state.params = { ...windowOf(query, Date.now()), size };
  state.body = bodyOf(query);
  state.scrollId = null;
  state.events = [];
  clear(byId("results").tBodies[0]);
  byId("search-total").textContent = "Searching…";
  await fetchPage();
}

export function loadMore() {
  return fetchPage();
}

export function exportCsv() {
  const records = state.events.map((event) => ({
    ...event, timeUtc: new Date(Number(event.timestamp)).toISOString(), summary: summary(event),
  }));
  download("audit-events.csv", toCsv(CSV_COLUMNS, records));
}
