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

async function call(path, init = {}) {
  const headers = { ...(init.headers || {}), Authorization: `Bearer ${token() || ""}` };
  const response = await fetch(path, { ...init, headers, cache: "no-store" });
  let payload = null;
  try {
    payload = await response.json();
  } catch (_) {
    payload = null;
  }
  if (response.status === 401) {
    clearToken();
    throw new Unauthorized((payload && payload.error) || "the token was not accepted");
  }
  if (!response.ok) {
    const detail = payload && payload.error ? payload.error : response.statusText;
    throw new Error(`${response.status}: ${detail}`);
  }
  return payload;
}

export function get(path, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(key, String(value));
  }
  const suffix = query.toString();
  return call(suffix ? `${path}?${suffix}` : path);
}

export function searchAudit(params, body) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(key, String(value));
  }
  return call(`/openapi/v1/events/audit/search?${query}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}
