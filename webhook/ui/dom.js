// Helpers shared by the pages: safe DOM building, formatting, and reading KGWE's JSON API.
// Everything shown comes from the API as text nodes, never as HTML, so a label cannot inject markup.

// The API lives next to /ui/, resolved from the page so a path prefix added by a proxy still works.
const API_BASE = new URL("../api/v1/", document.baseURI);

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// In a cluster the API wants a Kubernetes bearer token (the same `kubectl create token` gives). It is kept in
// sessionStorage: gone when the tab closes, never in a cookie, so no other site's page can make the browser send it.
const TOKEN_KEY = "kgwe.token";

export function apiToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setApiToken(token) {
  const trimmed = (token || "").trim();
  if (trimmed) sessionStorage.setItem(TOKEN_KEY, trimmed);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export const TOKEN_NEEDED = "This KGWE needs a Kubernetes token. Make one with " +
  "kubectl create token SERVICE_ACCOUNT -n NAMESPACE (or use your own) and paste it in the Token field above.";

export async function getJSON(path, params = {}) {
  const url = new URL(path, API_BASE);
  for (const [key, value] of Object.entries(params)) url.searchParams.set(key, value);
  const headers = { Accept: "application/json" };
  const token = apiToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch(url, { headers, cache: "no-store" });
  } catch (error) {
    throw new ApiError(0, `cannot reach ${url.pathname}: ${error.message}`);
  }
  if (response.status === 401) {
    throw new ApiError(401, token ? `The token was not accepted (expired or revoked?): ${await errorDetail(response)}`
      : TOKEN_NEEDED);
  }
  if (!response.ok) throw new ApiError(response.status, await errorDetail(response));
  return response.json();
}

async function errorDetail(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    const detail = body.detail ?? body.message ?? body.error ?? text;
    return typeof detail === "string" ? detail : JSON.stringify(detail);
  } catch {
    return text || response.statusText;
  }
}

// Properties rather than attributes: they reflect the live state of form controls.
const PROPERTIES = new Set(["checked", "value", "disabled", "indeterminate", "selected"]);

export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "class") element.className = value;
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (PROPERTIES.has(key)) element[key] = value;
    else if (value === false) continue;
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

export function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function replaceChildren(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

export const DASH = "—";

export function gib(mib) {
  return mib === null || mib === undefined ? DASH : `${(mib / 1024).toFixed(1)} GiB`;
}

// Prices are decimal strings: shown with the digits the API gave, at least two.
export function money(amount, currency) {
  if (amount === null || amount === undefined || amount === "") return null;
  const decimals = Math.max(2, (String(amount).split(".")[1] || "").length);
  try {
    return new Intl.NumberFormat("en-US", {
      style: "currency", currency, minimumFractionDigits: decimals, maximumFractionDigits: decimals,
    }).format(Number(amount));
  } catch {
    return `${amount} ${currency}`;
  }
}

// "nvidia.com/gpu" -> "gpu", "nvidia.com/mig-1g.10gb" -> "1g.10gb" (a MIG profile name says what it is).
export function shortResource(name) {
  return name.replace(/^nvidia\.com\//, "").replace(/^mig-/, "");
}

export function timestamp(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

export function plural(count, one, many = `${one}s`) {
  return `${count} ${count === 1 ? one : many}`;
}

export function errorBox(error) {
  const status = error.status ? ` (HTTP ${error.status})` : "";
  const box = h("div", { class: "error", role: "alert" }, h("strong", {}, `Could not load${status}: `), error.message);
  if (error.status === 401) box.id = "token-needed";
  return box;
}
