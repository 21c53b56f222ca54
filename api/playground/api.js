// The REST side of the playground: the typed API key (session storage only), calls with
// `Authorization: Bearer`, and every failure as one sentence a person can act on.

const KEY_STORAGE = "voicelane.api_key";

export function loadKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

export function saveKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

/** A failure of the API (or of reaching it), already in words. */
export class ApiError extends Error {
  constructor(message, { status = 0, code = "", field = null, retryAfterS = null } = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.field = field;
    this.retryAfterS = retryAfterS;
  }
}

/**
 * The sentence shown for an error of the API: what happened, in words, then the server's
 * own one-line message (which names the field, and the line and column of bad SSML).
 */
export function describe({ status = 0, code = "", message = "", retryAfterS = null }) {
  const retry = retryAfterS ? ` Retry in ${Math.ceil(retryAfterS)} s.` : "";
  const detail = message ? ` (${message})` : "";
  if (status === 401 || code === "unauthenticated" || code === "UNAUTHENTICATED") {
    return `The API key was refused: check the key typed above.${detail}`;
  }
  if (status === 429 || code === "quota_exceeded") {
    return `Over this key's quota.${retry}${detail}`;
  }
  if (code === "no_capacity" || code === "RESOURCE_EXHAUSTED") {
    return `No capacity for a new stream right now.${retry}${detail}`;
  }
  if (code === "store_full" || code === "unavailable" || code === "shutting_down"
      || status === 503) {
    return `The service is unavailable right now.${retry}${detail}`;
  }
  if (message && /SSML line \d+, column \d+/.test(message)) {
    return `Invalid SSML: ${message}`;
  }
  if (message) return `Refused: ${message}${code ? ` [${code}]` : ""}`;
  return `The request failed (HTTP ${status || "?"}${code ? `, ${code}` : ""}).`;
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const error = (body && body.error) || {};
  const header = response.headers.get("Retry-After");
  const retryAfterS = header ? Number(header) : null;
  const info = {
    status: response.status,
    code: error.code || "",
    message: error.message || response.statusText,
    retryAfterS,
  };
  return new ApiError(describe(info), { ...info, field: error.field || null });
}

/**
 * Call the API: `path` on this origin, with the key; `json` sent as JSON, `form` as
 * multipart. Resolves to the parsed JSON (or null for 204); rejects with an ApiError.
 */
export async function call(path, { method = "GET", json = undefined, form = undefined } = {}) {
  const headers = {};
  const key = loadKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form; // the browser sets the multipart boundary
  }
  let response;
  try {
    response = await fetch(path, { method, headers, body, credentials: "omit" });
  } catch (error) {
    throw new ApiError(
      `Cannot reach the API at ${location.origin}: ${error.message || error}. Is it running?`,
    );
  }
  if (!response.ok) throw await errorOf(response);
  if (response.status === 204) return null;
  return response.json();
}
