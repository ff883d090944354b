// The entity timeline: change events in order, aspects as of two points in time, side by side.
import { get } from "./api.js";
import { byId, clear, el, person, row, timeCell } from "./dom.js";

function parameters(values) {
  return Object.entries(values || {}).map(([key, value]) => `${key}=${value}`).join("; ");
}

export async function showTimeline(urn) {
  const result = await get("/api/v1/timeline", { urn });
  const body = byId("timeline-events").tBodies[0];
  clear(body);
  for (const event of result.events) {
    body.appendChild(row([timeCell(event.event_time), person(event.actor, event.actorPseudonym), event.category, event.operation,
      event.modifier ?? "", event.aspect_name ?? "", event.source_version ?? "", parameters(event.parameters)]));
  }
  byId("timeline-count").textContent = `${result.events.length} change events of ${urn}`;
  const times = [...new Set(result.events.map((event) => Number(event.event_time)))].sort((a, b) => a - b);
  for (const id of ["asof-a", "asof-b"]) {
    const select = byId(id);
    clear(select);
    for (const ms of times) select.appendChild(el("option", `${new Date(ms).toLocaleString()} (${new Date(ms).toISOString()})`, { value: ms }));
  }
  if (times.length) {
    byId("asof-a").value = String(times[Math.max(0, times.length - 2)]);
    byId("asof-b").value = String(times[times.length - 1]);
  }
  byId("asof-form").hidden = times.length === 0;
  clear(byId("diff"));
  return times;
}

function pretty(aspect) {
  if (!aspect) return [];
  return JSON.stringify(aspect.deleted ? { deleted: true } : aspect.aspect, null, 2).split("\n");
}

// Longest common subsequence of lines: marks each line kept, removed (left) or added (right).
export function diffLines(left, right) {
  const n = left.length;
  const m = right.length;
  const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i][j] = left[i] === right[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const rows = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && left[i] === right[j]) {
      rows.push([left[i], right[j], "same"]);
      i += 1;
      j += 1;
    } else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      rows.push([null, right[j], "added"]);
      j += 1;
    } else {
      rows.push([left[i], null, "removed"]);
      i += 1;
    }
  }
  return rows;
}

function sideBySide(name, left, right) {
  const section = el("section", null, { class: "aspect-diff" });
  const changed = JSON.stringify(left) !== JSON.stringify(right);
  section.appendChild(el("h3", `${name}${changed ? " (changed)" : ""}`));
  const table = el("table", null, { class: "diff-table" });
  const head = el("thead");
  head.appendChild(row([el("th", "Version A", { scope: "col" }), el("th", "Version B", { scope: "col" })]));
  table.appendChild(head);
  const body = el("tbody");
  for (const [a, b, kind] of diffLines(pretty(left), pretty(right))) {
    const tr = el("tr", null, { class: kind });
    tr.appendChild(el("td", a ?? "", { class: a === null ? "empty" : kind === "removed" ? "removed" : "" }));
    tr.appendChild(el("td", b ?? "", { class: b === null ? "empty" : kind === "added" ? "added" : "" }));
    body.appendChild(tr);
  }
  table.appendChild(body);
  section.appendChild(table);
  return section;
}

export async function compare(urn, atA, atB) {
  const [a, b] = await Promise.all([
    get("/api/v1/timeline/as-of", { urn, at: atA }),
    get("/api/v1/timeline/as-of", { urn, at: atB }),
  ]);
  const byName = (result) => Object.fromEntries(result.aspects.map((aspect) => [aspect.aspect_name, aspect]));
  const left = byName(a);
  const right = byName(b);
  const names = [...new Set([...Object.keys(left), ...Object.keys(right)])].sort();
  const target = byId("diff");
  clear(target);
  target.appendChild(el("p", `Version A: as of ${new Date(Number(atA)).toISOString()}; version B: as of ${new Date(Number(atB)).toISOString()}; ${names.length} aspects`));
  for (const name of names) target.appendChild(sideBySide(name, left[name], right[name]));
}
