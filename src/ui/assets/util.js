// Shared helpers of the UI pages: DOM building, the API client, formatting.
// Every URL is relative to the page, so the UI works under any route prefix.

/** Builds an element: el('div', {class: 'x', onclick: f}, 'text', child, ...). */
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k === 'value') e.value = v;
    else if (k === 'checked') e.checked = !!v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

/** An error the API answered (errorType and error as Prometheus sends them). */
export class ApiError extends Error {
  constructor(type, message, status) {
    super(message);
    this.type = type;
    this.status = status;
  }
}

/**
 * Calls the HTTP API at `path` (e.g. 'api/v1/query') with `params` (an object; arrays repeat
 * the key). Queries go as POST forms (long expressions do not fit a URL). Resolves to the
 * whole envelope: {data, warnings, infos}; with `opts.raw`, a bare JSON answer is taken as
 * the data.
 */
export async function api(path, params, opts) {
  const body = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null) continue;
    for (const x of Array.isArray(v) ? v : [v]) body.append(k, String(x));
  }
  const post = opts && opts.post;
  const url = post || !body.toString() ? path : path + '?' + body.toString();
  let resp;
  try {
    resp = await fetch(url, post ? {method: 'POST', body, signal: opts.signal} : {signal: opts && opts.signal});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError('network', `cannot reach the server: ${e.message}`, 0);
  }
  let json;
  try {
    json = await resp.json();
  } catch (e) {
    throw new ApiError('bad_response', `HTTP ${resp.status}: the answer is not JSON`, resp.status);
  }
  // inferdb's own endpoints (inferdb/v1/*) answer their JSON bare, and errors in the envelope
  if (opts && opts.raw && json.status === undefined && resp.ok) return {data: json};
  if (json.status !== 'success') {
    throw new ApiError(json.errorType || 'error', json.error || `HTTP ${resp.status}`, resp.status);
  }
  return json;
}

/** Seconds in a Prometheus duration ('1h30m', '5m', '90s', '1d'); NaN when not one. */
export function parseDuration(s) {
  s = String(s || '').trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  const units = {ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000};
  const re = /(\d+)(ms|s|m|h|d|w|y)/gy;
  let total = 0;
  let m;
  let pos = 0;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * units[m[2]];
    pos = re.lastIndex;
  }
  return pos === s.length && pos > 0 ? total : NaN;
}

/** Seconds as a Prometheus duration ('1h30m'). */
export function formatDuration(sec) {
  if (!isFinite(sec) || sec <= 0) return '0s';
  let ms = Math.round(sec * 1000);
  let out = '';
  for (const [u, n] of [['y', 31536000000], ['w', 604800000], ['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000], ['ms', 1]]) {
    if (ms >= n) {
      out += Math.floor(ms / n) + u;
      ms %= n;
    }
  }
  return out;
}

/** A number as Prometheus' JSON writes it, kept exact ('0.1', '1e+21', 'NaN', '+Inf'). */
export function formatValue(s) {
  return String(s);
}

/** A value for people: 4 significant digits, thousands grouped. */
export function formatHuman(v, unit) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (!isFinite(v)) return v > 0 ? '+Inf' : '-Inf';
  let s;
  const a = Math.abs(v);
  if (unit === 's') {
    if (a === 0) return '0 s';
    if (a < 1e-3) return (v * 1e6).toPrecision(3) + ' µs';
    if (a < 1) return (v * 1e3).toPrecision(3) + ' ms';
    return v.toPrecision(3) + ' s';
  }
  if (unit === '%') return (v * 100).toFixed(a * 100 < 10 ? 2 : 1) + ' %';
  if (a === 0) s = '0';
  else if (a >= 1e15 || a < 1e-4) s = v.toExponential(3);
  else if (a >= 1000) s = Math.round(v).toLocaleString('en-US');
  else s = String(Number(v.toPrecision(4)));
  return unit ? `${s} ${unit}` : s;
}

/** A label set as PromQL prints it: name{a="b", c="d"}. */
export function formatSeries(metric) {
  const name = metric.__name__ || '';
  const pairs = Object.entries(metric)
    .filter(([k]) => k !== '__name__')
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return pairs.length ? `${name}{${pairs.join(', ')}}` : name || '{}';
}

/** 'YYYY-MM-DD HH:MM:SS' in UTC, the format of Prometheus' end_input parameter. */
export function formatTime(ms) {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getUTCFullYear()}-${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())} ${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())}`;
}

/** Reads end_input / moment_input: 'YYYY-MM-DD HH:MM:SS' (UTC), ISO 8601, or Unix seconds. */
export function parseTime(s) {
  s = String(s || '').trim();
  if (!s) return null;
  if (/^\d+(\.\d+)?$/.test(s)) return Math.round(Number(s) * 1000);
  const m = /^(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d)(?::(\d\d))?$/.exec(s);
  if (m) return Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
  const t = Date.parse(s);
  return isNaN(t) ? null : t;
}

/** '3.2s ago' from a time in ms. */
export function ago(ms) {
  const s = (Date.now() - ms) / 1000;
  if (s < 0) return 'just now';
  if (s < 60) return `${s.toFixed(1)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s ago`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m ago`;
}

/** Badges for each label of `labels` (an object). */
export function labelBadges(labels) {
  return el('span', {class: 'labels'},
    Object.entries(labels).map(([k, v]) => el('span', {class: 'badge'}, `${k}="${v}"`)));
}

/** A box with an error, warnings or infos. */
export function notice(kind, text) {
  return el('div', {class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status'}, text);
}

/** A page title and an optional line of help. */
export function heading(text, help) {
  return el('div', {class: 'page-head'}, el('h1', {}, text), help ? el('p', {class: 'help'}, help) : null);
}

/** A table from rows of cells (strings or nodes). */
export function table(head, rows, attrs) {
  return el('table', Object.assign({class: 'grid'}, attrs || {}),
    el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', {}, c))))));
}

/**
 * Marks the page usable (its first data drawn): `performance.mark('inferdb:ready')` for
 * benches/ui_load.py and `body[data-ready]` for the browser test. Only the first call counts.
 */
export function ready() {
  if (document.body.dataset.ready) return;
  document.body.dataset.ready = '1';
  performance.mark('inferdb:ready');
}
