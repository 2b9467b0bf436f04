// Every data call of the console goes through here: the API, with the token the user gave
// (sessionStorage, sent as `Authorization: Bearer`). Nothing else holds data or rights.

const KEY = "tsblob.token";

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (v) => sessionStorage.setItem(KEY, v),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Listeners for a 401 answer (the token is missing or no longer valid). */
export const onUnauthorized = new Set();

function headers(extra = {}) {
  const h = { ...extra };
  const t = token.get();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function failure(r) {
  let code = `http_${r.status}`;
  let message = r.statusText || "request failed";
  try {
    const j = await r.json();
    if (j && j.error) { code = j.error.code; message = j.error.message; }
  } catch (_) { /* not JSON */ }
  if (r.status === 401) for (const f of onUnauthorized) f();
  return new ApiError(r.status, code, message);
}

/** A request; JSON answers are parsed, `raw: true` gives the Response. */
export async function api(path, { method = "GET", json, body, raw = false, signal, extraHeaders } = {}) {
  const h = headers(extraHeaders);
  if (json !== undefined) {
    body = JSON.stringify(json);
    h["Content-Type"] = "application/json";
  }
  const r = await fetch(path, { method, headers: h, body, signal, cache: "no-store" });
  if (!r.ok) throw await failure(r);
  if (raw) return r;
  const ct = r.headers.get("content-type") || "";
  return ct.includes("json") ? r.json() : r.text();
}

// One path segment: `.` and `..` escaped too (encodeURIComponent keeps them, and the URL
// parser would resolve them: a request for another bucket than the one named).
function segment(s) {
  return s === "." || s === ".." ? s.replaceAll(".", "%2E") : encodeURIComponent(s);
}

export function bucketPath(bucket) {
  return `/api/v1/b/${segment(bucket)}`;
}

export function entryPath(bucket, entry) {
  return `${bucketPath(bucket)}/${entry.split("/").map(segment).join("/")}`;
}

/** What this server's query route takes (from its OpenAPI document, read once). */
let caps = null;
export async function capabilities() {
  if (caps) return caps;
  caps = { meta: false, when: false, follow: false };
  try {
    const doc = await api("/api/v1/openapi.json");
    const q = doc.paths && doc.paths["/api/v1/b/{bucket}/{entry}/query"];
    const names = new Set(((q && q.get && q.get.parameters) || []).map((p) => p.name));
    caps = { meta: names.has("meta"), when: names.has("when"), follow: names.has("follow") };
  } catch (_) { /* keep the defaults */ }
  return caps;
}

const td = new TextDecoder();

/**
 * Parses a query stream (docs/api.md "Framing") into records with their payloads. The
 * records the server skipped as damaged (frame kind 5) are in `out.skipped`:
 * `{skipped: [{entry?, ts, code}], skipped_count}`, or undefined when none were.
 */
export function parseFrames(buf) {
  const dv = new DataView(buf);
  const u8 = new Uint8Array(buf);
  const out = [];
  out.skipped = undefined;
  let p = 0;
  while (p < u8.length) {
    const kind = u8[p];
    if (kind === 1) {
      const ts = Number(dv.getBigUint64(p + 1, true));
      const c = dv.getUint16(p + 9, true);
      const n = dv.getUint16(p + 11, true);
      const l = dv.getUint32(p + 13, true);
      const size = Number(dv.getBigUint64(p + 17, true));
      let q = p + 25;
      const contentType = c ? td.decode(u8.subarray(q, q + c)) : "application/octet-stream";
      q += c;
      const end = q + l;
      const labels = {};
      for (let i = 0; i < n; i++) {
        const kl = dv.getUint16(q, true); q += 2;
        const k = td.decode(u8.subarray(q, q + kl)); q += kl;
        const vl = dv.getUint16(q, true); q += 2;
        labels[k] = td.decode(u8.subarray(q, q + vl)); q += vl;
      }
      q = end;
      out.push({ ts, size, content_type: contentType, labels, payload: u8.subarray(q, q + size) });
      p = q + size;
    } else if (kind === 0) {
      break;
    } else if (kind === 2) {
      const len = dv.getUint32(p + 1, true);
      const j = JSON.parse(td.decode(u8.subarray(p + 5, p + 5 + len)));
      throw new ApiError(500, j.error.code, j.error.message);
    } else if (kind === 3) {
      // A heartbeat (the server's time, u64): sent while a long scan finds nothing.
      p += 9;
    } else if (kind === 5) {
      // Damaged records the server skipped; the stream goes on to its end frame.
      const len = dv.getUint32(p + 1, true);
      out.skipped = JSON.parse(td.decode(u8.subarray(p + 5, p + 5 + len)));
      p += 5 + len;
    } else {
      throw new Error(`unexpected frame kind ${kind} at byte ${p}`);
    }
  }
  return out;
}

/**
 * Records of a window: metadata (and, without `meta=true` on the server, payloads).
 * opts: start, stop, limit, desc, filters ([[key, value]] for eq.), when (a JSON string).
 */
export async function queryRecords(bucket, entry, opts = {}) {
  const c = await capabilities();
  const qs = new URLSearchParams();
  if (opts.start !== undefined && opts.start !== null) qs.set("start", String(opts.start));
  if (opts.stop !== undefined && opts.stop !== null) qs.set("stop", String(opts.stop));
  if (opts.limit) qs.set("limit", String(opts.limit));
  if (opts.desc) qs.set("desc", "true");
  for (const [k, v] of opts.filters || []) qs.append(`eq.${k}`, v);
  if (opts.when && c.when) qs.set("when", opts.when);
  if (c.meta && !opts.payloads) qs.set("meta", "true");
  const r = await api(`${entryPath(bucket, entry)}/query?${qs}`, { raw: true, signal: opts.signal });
  if ((r.headers.get("content-type") || "").includes("ndjson")) {
    const text = await r.text();
    const out = [];
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      const j = JSON.parse(line);
      if (j.error) throw new ApiError(500, j.error.code, j.error.message);
      if (j.heartbeat !== undefined && j.ts === undefined) continue; // a long scan's keep-alive
      if (j.skipped && j.ts === undefined) {
        out.skipped = j; // (meta=true reads no payload: it never skips a damaged one)
        continue;
      }
      out.push(j);
    }
    return out;
  }
  return parseFrames(await r.arrayBuffer());
}

/** The histogram of an entry's records over [start, stop). */
export function histogram(bucket, entry, { start, stop, step, signal } = {}) {
  const qs = new URLSearchParams();
  if (start !== undefined) qs.set("start", String(start));
  if (stop !== undefined) qs.set("stop", String(stop));
  if (step !== undefined) qs.set("step", String(step));
  return api(`${entryPath(bucket, entry)}/histogram?${qs}`, { signal });
}
