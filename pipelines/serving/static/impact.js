// The impact view: an entity's lineage graph as of a time drawn in SVG, the window's changes on each
// node, and the changes listed by hop. Every value from the data goes in as text nodes.
import { get } from "./api.js";
import { actionButton, byId, clear, el, row, timeCell } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const COLUMN = 240;
const NODE_WIDTH = 200;
const NODE_HEIGHT = 46;
const GAP = 18;
const MARGIN = 12;
const LABEL_LENGTH = 26;
export const FIELDS = ["urn", "direction", "depth", "since", "until", "at"];

function svg(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

// A short readable name: a dataset's name, else the last part of the urn's key.
export function shortName(urn) {
  const key = urn.split(":").slice(3).join(":");
  let name = key;
  if (key.startsWith("(") && key.endsWith(")")) {
    const parts = key.slice(1, -1).split(/,(?![^(]*\))/);
    name = urn.startsWith("urn:li:dataset:") && parts.length > 1 ? parts[1] : parts[parts.length - 1];
  }
  return name.length > LABEL_LENGTH ? `${name.slice(0, LABEL_LENGTH - 1)}…` : name;
}

function describeChange(change) {
  return `${change.category} ${change.operation}${change.actor ? ` by ${change.actor}` : ""}`;
}

function nodeLabel(node, changes) {
  if (node.hidden) return `An entity outside your scope, hop ${node.hop}`;
  const listed = changes.slice(0, 5).map(describeChange).join("; ");
  const more = changes.length > 5 ? `; and ${changes.length - 5} more` : "";
  return `${node.urn}, hop ${node.hop}, ${changes.length} changes in the window${changes.length ? `: ${listed}${more}` : ""}`;
}

// Columns by hop, the entity asked about on the right for upstream and on the left for downstream,
// so edges run left to right either way.
function layout(graph) {
  const byHop = new Map();
  for (const node of graph.nodes) {
    if (!byHop.has(node.hop)) byHop.set(node.hop, []);
    byHop.get(node.hop).push(node);
  }
  const maxHop = Math.max(...byHop.keys());
  const places = new Map();
  let tallest = 0;
  for (const [hop, nodes] of byHop) {
    const column = graph.direction === "upstream" ? maxHop - hop : hop;
    nodes.forEach((node, index) => {
      places.set(node.id, { x: MARGIN + column * COLUMN, y: MARGIN + index * (NODE_HEIGHT + GAP) });
    });
    tallest = Math.max(tallest, nodes.length);
  }
  return { places, width: 2 * MARGIN + maxHop * COLUMN + NODE_WIDTH, height: 2 * MARGIN + tallest * (NODE_HEIGHT + GAP) - GAP };
}

export function drawGraph(graph, changesByUrn, onOpen) {
  const { places, width, height } = layout(graph);
  const when = new Date(Number(graph.at)).toISOString();
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "group", "aria-labelledby": "impact-svg-title", "aria-describedby": "impact-svg-desc", class: "lineage" });
  root.appendChild(svg("title", { id: "impact-svg-title" }, `${graph.direction === "upstream" ? "Upstream" : "Downstream"} lineage of ${graph.urn} as of ${when}`));
  root.appendChild(svg("desc", { id: "impact-svg-desc" }, `${graph.nodes.length} entities and ${graph.edges.length} edges, up to ${graph.depth} hops; each entity shows how many changes it had in the window. Edges run from upstream to downstream.`));
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.appendChild(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" }));
  defs.appendChild(marker);
  root.appendChild(defs);
  const edges = svg("g", { class: "edges", "aria-hidden": "true" });
  for (const edge of graph.edges) {
    const from = places.get(edge.from);
    const to = places.get(edge.to);
    const x1 = from.x + NODE_WIDTH;
    const y1 = from.y + NODE_HEIGHT / 2;
    const x2 = to.x;
    const y2 = to.y + NODE_HEIGHT / 2;
    const bend = Math.max(40, Math.abs(x2 - x1) / 2);
    const path = svg("path", { d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`, class: "edge", "marker-end": "url(#arrow)" });
    path.appendChild(svg("title", {}, edge.kinds.join(", ")));
    edges.appendChild(path);
  }
  root.appendChild(edges);
  const nodes = svg("g", { class: "nodes", role: "list" });
  for (const node of graph.nodes) {
    const { x, y } = places.get(node.id);
    const changes = node.hidden ? [] : changesByUrn.get(node.urn) || [];
    const item = svg("g", { class: `node${node.hidden ? " hidden-node" : ""}${node.hop === 0 ? " target" : ""}`, role: "listitem", tabindex: 0, "data-urn": node.urn ?? "", transform: `translate(${x} ${y})` });
    item.appendChild(svg("title", {}, nodeLabel(node, changes)));
    item.appendChild(svg("rect", { width: NODE_WIDTH, height: NODE_HEIGHT, rx: 6 }));
    item.appendChild(svg("text", { x: 10, y: 19, class: "name" }, node.hidden ? "(outside your scope)" : shortName(node.urn)));
    item.appendChild(svg("text", { x: 10, y: 37, class: "detail" }, node.hidden ? `hop ${node.hop}` : `${node.entityType} · hop ${node.hop}`));
    if (changes.length) {
      item.appendChild(svg("circle", { cx: NODE_WIDTH - 4, cy: 4, r: 12, class: "badge" }));
      item.appendChild(svg("text", { x: NODE_WIDTH - 4, y: 8, class: "badge-count", "text-anchor": "middle" }, changes.length));
    }
    if (!node.hidden && node.hop > 0) {
      // Enter or a click centres the view on this entity.
      item.addEventListener("click", () => onOpen(node.urn));
      item.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          onOpen(node.urn);
        }
      });
    }
    nodes.appendChild(item);
  }
  root.appendChild(nodes);
  return root;
}

function pathText(path, direction) {
  const names = path.map((node) => (node.hidden ? "(hidden)" : node.urn));
  return names.join(direction === "upstream" ? " ← " : " → ");
}

function hopTable(hop, changes, direction, reach) {
  const section = el("section", null, { class: "hop", "aria-labelledby": `hop-${hop}` });
  section.appendChild(el("h3", hop === 0 ? `Hop 0: the entity itself (${changes.length})` : `Hop ${hop} (${changes.length})`, { id: `hop-${hop}` }));
  const table = el("table", null, { class: "impact-changes" });
  table.appendChild(el("caption", `Changes ${hop} hops ${direction} in the window`, { class: "visually-hidden" }));
  const head = el("thead");
  head.appendChild(row(["Time", "Entity", "Category", "Operation", "Actor", "Path", "Downstream"].map((name) => el("th", name, { scope: "col" }))));
  table.appendChild(head);
  const body = el("tbody");
  for (const change of changes) {
    body.appendChild(row([timeCell(change.eventTime), change.entityUrn, change.category, change.operation, change.actor ?? "",
      el("td", pathText(change.path, direction), { class: "long" }),
      (() => { const cell = el("td"); cell.appendChild(actionButton("What did this reach downstream", () => reach(change))); return cell; })()]));
  }
  table.appendChild(body);
  section.appendChild(table);
  return section;
}

export async function showImpact(query, open) {
  const graphBox = byId("impact-graph");
  const hops = byId("impact-hops");
  clear(graphBox);
  clear(hops);
  byId("impact-summary").textContent = "";
  if (!query.urn) return;
  const walk = { urn: query.urn, direction: query.direction || "upstream", depth: query.depth || "3" };
  // The graph is taken at the chosen time, else at the window's end.
  const [found, graph] = await Promise.all([
    get("/api/v1/impact", { ...walk, since: query.since, until: query.until }),
    get("/api/v1/impact/graph", { ...walk, at: query.at || query.until }),
  ]);
  const changesByUrn = new Map();
  for (const change of found.changes) {
    if (!changesByUrn.has(change.entityUrn)) changesByUrn.set(change.entityUrn, []);
    changesByUrn.get(change.entityUrn).push(change);
  }
  const window = `${new Date(Number(found.since)).toISOString()} to ${new Date(Number(found.until)).toISOString()}`;
  byId("impact-summary").textContent = `${found.count} changes ${found.direction} of ${found.urn} within ${found.depth} hops, ${window}; graph as of ${new Date(Number(graph.at)).toISOString()}: ${graph.nodes.length} entities${graph.truncated ? " (the nearest only)" : ""}`;
  graphBox.appendChild(drawGraph(graph, changesByUrn, (urn) => open.impact({ ...query, urn })));
  const byHop = new Map();
  for (const change of found.changes) {
    if (!byHop.has(change.hop)) byHop.set(change.hop, []);
    byHop.get(change.hop).push(change);
  }
  const reach = (change) => open.impact({ urn: change.entityUrn, direction: "downstream", depth: walk.depth, since: String(change.eventTime), until: String(found.until), at: String(change.eventTime) });
  for (const hop of [...byHop.keys()].sort((a, b) => a - b)) hops.appendChild(hopTable(hop, byHop.get(hop), found.direction, reach));
  if (!found.changes.length) hops.appendChild(el("p", "No changes reached it in the window."));
}
