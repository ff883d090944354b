// The activity views: changes per day by category, top actors and entities, one actor's page.
import { get } from "./api.js";
import { drawStacked } from "./charts.js";
import { actionButton, byId, clear, el, person, row, timeCell } from "./dom.js";

function dayMs(text) {
  if (!text) return "";
  const ms = Date.parse(`${text}T00:00:00Z`);
  if (Number.isNaN(ms)) throw new Error(`${text}: not a date`);
  return ms;
}

function stack(days, key) {
  const names = [...new Set(days.flatMap((day) => Object.keys(day[key])))].sort();
  const series = {};
  for (const name of names) series[name] = days.map((day) => day[key][name] || 0);
  return series;
}

function rankedList(target, items, label, onOpen) {
  clear(target);
  for (const item of items) {
    const li = el("li");
    li.appendChild(actionButton(label(item), () => onOpen(item)));
    li.appendChild(el("span", ` ${item.events} events`, { class: "count" }));
    target.appendChild(li);
  }
  if (!items.length) target.appendChild(el("li", "nothing in this window"));
}

export async function showActivity(query, open) {
  const result = await get("/api/v1/activity", { since: dayMs(query.since), until: dayMs(query.until), limit: 10 });
  const labels = result.days.map((day) => day.date);
  const series = stack(result.days, "byCategory");
  // Days without change events still count their other events (logins, policy changes...).
  const other = result.days.map((day) => day.events - Object.values(day.byCategory).reduce((a, b) => a + b, 0));
  if (other.some((value) => value > 0)) series["other events"] = other;
  drawStacked(byId("chart-daily"), labels, series);
  // An actor's page is opened by pseudonym when there is one: an erased person has no identity to ask by.
  rankedList(byId("top-actors"), result.topActors, (item) => person(item.actor, item.actorPseudonym),
    (item) => open.actor(item.actorPseudonym ?? item.actor));
  rankedList(byId("top-entities"), result.topEntities, (item) => item.entityUrn, (item) => open.timeline(item.entityUrn));
}

export async function showActor(actor, query, open) {
  const result = await get("/api/v1/activity/actor", { actor, since: dayMs(query.since), until: dayMs(query.until), limit: 20 });
  byId("actor-name").textContent = person(result.actor, result.actorPseudonym);
  drawStacked(byId("chart-actor"), result.days.map((day) => day.date), stack(result.days, "byType"));
  rankedList(byId("actor-entities"), result.entities, (item) => item.entityUrn, (item) => open.timeline(item.entityUrn));
  const body = byId("actor-anomalies").tBodies[0];
  clear(body);
  for (const anomaly of result.anomalies) {
    body.appendChild(row([timeCell(anomaly.windowStart), anomaly.granularity, anomaly.kind, Number(anomaly.score).toFixed(2)]));
  }
  byId("actor-anomalies-none").hidden = result.anomalies.length > 0;
}
