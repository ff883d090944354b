// Talks to the lakehouse HTTP API with the token kept in sessionStorage.
const TOKEN_KEY = "lakehouse.explorer.token";

export class Unauthorized extends Error {}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

async function send(path, init = {}) {
  const headers = { ...(init.headers || {}), Authorization: `Bearer ${token() || ""}` };
  return fetch(path, { ...init, headers, cache: "no-store" });
}

async function failure(response) {
  let payload = null;
  try {
    payload = await response.json();
  } catch (_) {
    payload = null;
  }
  if (response.status === 401) {
    clearToken();
    return new Unauthorized((payload && payload.error) || "the token was not accepted");
  }
  const detail = payload && payload.error ? payload.error : response.statusText;
  return new Error(`${response.status}: ${detail}`);
}

async function call(path, init = {}) {
  const response = await send(path, init);
  if (!response.ok) throw await failure(response);
  let payload = null;
  try {
    payload = await response.json();
  } catch (_) {
    payload = null;
  }
  return payload;
}

function queryString(params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(key, String(value));
  }
  return query.toString();
}

// A file the API sends as an attachment (the regulator report): its bytes and its file name.
export async function getFile(path, params = {}) {
  const response = await send(`${path}?${queryString(params)}`);
  if (!response.ok) throw await failure(response);
  const disposition = response.headers.get("Content-Disposition") || "";
  const match = /filename="([^"]+)"/.exec(disposition);
  return { blob: await response.blob(), name: match ? match[1] : "download" };
}

export function get(path, params = {}) {
  const suffix = queryString(params);
  return call(suffix ? `${path}?${suffix}` : path);
}

export function searchAudit(params, body) {
  return call(`/openapi/v1/events/audit/search?${queryString(params)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}
