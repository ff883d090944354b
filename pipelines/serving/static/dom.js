// Small DOM helpers: every value from the data goes in as text, never as markup.

export function el(tag, text, attributes = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

export function byId(id) {
  return document.getElementById(id);
}

// A time cell: local time shown, the UTC time on hover.
export function timeCell(ms) {
  const date = new Date(Number(ms));
  const cell = el("td");
  const time = el("time", date.toLocaleString(), { datetime: date.toISOString(), title: `${date.toISOString()} (UTC)` });
  cell.appendChild(time);
  return cell;
}

// A cell holding an urn: it may break after its punctuation (`<wbr>`, nothing added to the text), never
// inside a name.
export function urnCell(urn) {
  const cell = el("td", null, { class: "urn" });
  for (const part of urn.split(/(?<=[:,(./])/)) {
    cell.appendChild(document.createTextNode(part));
    cell.appendChild(document.createElement("wbr"));
  }
  return cell;
}

// A table row: text breaks only between words, urns also after their punctuation, long values anywhere.
// A person is shown as the API names them; an erased person, whose identity is gone, beside their pseudonym.
export function person(name, pseudonym) {
  return pseudonym && name === "erased subject" ? `erased subject (${pseudonym})` : name ?? "";
}

export function row(values) {
  const tr = el("tr");
  for (const value of values) {
    if (value instanceof Node) tr.appendChild(value);
    else if (typeof value === "string" && value.startsWith("urn:li:")) tr.appendChild(urnCell(value));
    // Text with a run of more than 40 characters without a space (a value, not a word) may break anywhere.
    else if (typeof value === "string" && /\S{41}/.test(value)) tr.appendChild(el("td", value, { class: "long" }));
    else tr.appendChild(el("td", value ?? ""));
  }
  return tr;
}

// A button that runs `action`: used instead of links so no data value ever becomes a URL.
export function actionButton(label, action, className = "link") {
  const button = el("button", label, { type: "button", class: className });
  button.addEventListener("click", action);
  return button;
}

export function showMessage(text) {
  const message = byId("message");
  message.textContent = text;
  message.hidden = !text;
}

function csvValue(value) {
  let text = value === null || value === undefined ? "" : String(value);
  // A leading =, +, - or @ would be a formula in a spreadsheet.
  if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export function toCsv(columns, records) {
  const lines = [columns.join(",")];
  for (const record of records) lines.push(columns.map((name) => csvValue(record[name])).join(","));
  return `${lines.join("\r\n")}\r\n`;
}

export function download(name, content) {
  const blob = content instanceof Blob ? content : new Blob([content], { type: "text/csv" });
  const url = URL.createObjectURL(blob);
  const link = el("a", null, { href: url, download: name });
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// A table row that expands to a JSON document, and the button that toggles it.
export function expandableRows(values, documentValue, columns) {
  const detail = el("tr", null, { class: "raw", hidden: "" });
  const cell = el("td", null, { colspan: String(columns) });
  cell.appendChild(el("pre", JSON.stringify(documentValue, null, 2)));
  detail.appendChild(cell);
  const toggle = actionButton("Show JSON", () => {
    detail.hidden = !detail.hidden;
    toggle.textContent = detail.hidden ? "Show JSON" : "Hide JSON";
    toggle.setAttribute("aria-expanded", String(!detail.hidden));
  });
  toggle.setAttribute("aria-expanded", "false");
  const toggleCell = el("td");
  toggleCell.appendChild(toggle);
  const main = row([...values, toggleCell]);
  main.classList.add("event");
  return [main, detail];
}
