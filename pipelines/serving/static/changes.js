// The change-event search: actor, entity urn or prefix, category, operation; pages through nextCursor.
import { get, getFile } from "./api.js";
import { byId, clear, download, expandableRows, person, timeCell, toCsv } from "./dom.js";

export const FIELDS = ["actor", "entity", "category", "operation", "since", "until", "size"];
const CSV_COLUMNS = ["timeUtc", "actor", "operation", "category", "entityUrn", "modifier", "parameters", "aspectName", "eventId"];
const state = { query: null, cursor: null, changes: [], total: 0 };

export function parameterSummary(change) {
  const text = Object.entries(change.parameters || {}).map(([key, value]) => `${key}=${value}`).join("; ");
  return text.length > 140 ? `${text.slice(0, 139)}…` : text;
}

function dayMs(text, name) {
  if (!text) return "";
  const ms = Date.parse(`${text}T00:00:00Z`);
  if (Number.isNaN(ms)) throw new Error(`${name}: ${text} is not a date`);
  return ms;
}

async function fetchPage() {
  const page = await get("/api/v1/changes", { ...state.query, after: state.cursor });
  if (!state.cursor) state.total = page.total;
  state.cursor = page.nextCursor || null;
  state.changes.push(...page.changes);
  const body = byId("changes").tBodies[0];
  for (const change of page.changes) {
    const values = [timeCell(change.timestamp), person(change.actor, change.actorPseudonym), change.operation, change.category,
      change.entityUrn, change.modifier ?? "", parameterSummary(change)];
    for (const tr of expandableRows(values, change, 8)) body.appendChild(tr);
  }
  byId("changes-total").textContent = `${state.total} matching change events, ${state.changes.length} shown`;
  byId("changes-more").hidden = !state.cursor;
  byId("changes-csv").disabled = state.changes.length === 0;
}

export async function runChanges(query) {
  state.query = {
    actor: query.actor, entity: query.entity, category: query.category, operation: query.operation,
    since: dayMs(query.since, "Since"), until: dayMs(query.until, "Until"), size: query.size || "50",
  };
  state.cursor = null;
  state.changes = [];
  clear(byId("changes").tBodies[0]);
  byId("changes-total").textContent = "Searching…";
  await fetchPage();
}

export function moreChanges() {
  return fetchPage();
}

export function exportChanges() {
  const records = state.changes.map((change) => ({
    ...change, timeUtc: new Date(Number(change.timestamp)).toISOString(), parameters: parameterSummary(change),
  }));
  download("change-events.csv", toCsv(CSV_COLUMNS, records));
}

// The regulator report of the form's window and filters, as the API streams it (csv, html or parquet).
export async function downloadReport(query, format) {
  if (!query.since || !query.until) throw new Error("Report: choose Since and Until (the report's window)");
  const entity = query.entity && !query.entity.endsWith("*") ? query.entity : undefined;
  if (query.entity && !entity) throw new Error("Report: the entity must be a whole URN, not a prefix");
  const params = {
    from: dayMs(query.since, "Since"), to: dayMs(query.until, "Until"), actor: query.actor, entity, format,
  };
  const file = await getFile("/openapi/v1/audit/report", params);
  download(file.name, file.blob);
  return file.name;
}
