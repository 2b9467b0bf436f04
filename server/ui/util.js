// Small DOM and formatting helpers. Text always goes through textContent: nothing from
// the API is ever parsed as HTML.

/** Builds an element: h("a", {href: "#/"}, "text", child...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "style") Object.assign(el.style, v); // CSSOM: allowed under the CSP, unlike a style attribute
    else if (k === "value") el.value = v;
    else if (k === "checked") el.checked = !!v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
}

export function count(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

function pad(n, w = 2) { return String(n).padStart(w, "0"); }

/** µs since the epoch → "2026-01-02 03:04:05.678901" (UTC). */
export function time(us) {
  if (us === null || us === undefined) return "–";
  const ms = Math.floor(us / 1000);
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return String(us);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.` +
    pad(us % 1000000, 6);
}

/** A short time for axis labels, precise enough for the span shown. */
export function shortTime(us, span) {
  const d = new Date(Math.floor(us / 1000));
  const hms = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
  if (span > 2 * 86400e6) return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  if (span > 60e6) return hms;
  return `${hms}.${pad(us % 1000000, 6)}`;
}

export function duration(us) {
  const s = us / 1e6;
  if (s < 1e-3) return `${us} µs`;
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 2 : 0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(0)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

// Characters that change how the text around them is shown, or are not shown at all:
// controls, zero-width and bidirectional formatting characters.
const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]/g;
// The most of one label value a row shows (the whole value is in the record's details).
const LABEL_SHOWN = 200;

/**
 * Text a writer chose (label values, names in messages from other servers), as it can be
 * shown: each invisible or direction-changing character as `\u{XXXX}`, so that it can
 * neither hide nor reorder the text after it. Bug (browser probe of 2026-11-29): a
 * right-to-left override in one label value showed the labels after it reversed, so
 * `status=…` could read "approved".
 */
export function visible(text) {
  return String(text).replace(INVISIBLE, (c) => `\\u{${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}}`);
}

export function labelsText(labels, whole = false) {
  return Object.entries(labels || {}).map(([k, v]) => {
    const shown = visible(v);
    return `${k}=${whole || shown.length <= LABEL_SHOWN ? shown : `${shown.slice(0, LABEL_SHOWN)}… (${v.length} characters)`}`;
  }).join(" ");
}

/** Shows an error (an ApiError shows its status, code and the API's message). */
export function errorBox(err) {
  const text = err && err.status
    ? `${err.status} ${err.code}: ${visible(err.message)}`
    : visible((err && err.message) || err);
  return h("div", { class: "error", role: "alert" }, text);
}

const SIZE_UNITS = { b: 1, k: 1e3, kb: 1e3, kib: 1024, m: 1e6, mb: 1e6, mib: 1024 ** 2, g: 1e9, gb: 1e9, gib: 1024 ** 3, t: 1e12, tb: 1e12, tib: 1024 ** 4 };
const DURATION_UNITS = { us: 1, µs: 1, ms: 1e3, s: 1e6, m: 60e6, min: 60e6, h: 3600e6, d: 86400e6, w: 604800e6 };

/** "24 MiB", "1.5GB", "4096" → bytes; "" → undefined; "none" → null. Throws on anything else. */
export function parseSize(text, what) {
  const t = String(text).trim().toLowerCase();
  if (t === "") return undefined;
  if (t === "none" || t === "off") return null;
  const m = t.match(/^(\d+(?:\.\d+)?)\s*([a-z]*)$/);
  const unit = m && SIZE_UNITS[m[2] || "b"];
  if (!unit) throw new Error(`${what}: "${text}" is not a size: give bytes or a number with a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. "24 MiB"`);
  return Math.round(Number(m[1]) * unit);
}

/** "30d", "12 h", "90s", "1500ms" → µs; "" → undefined; "none"/"0" → null. Throws on anything else. */
export function parseDuration(text, what) {
  const t = String(text).trim().toLowerCase();
  if (t === "") return undefined;
  if (t === "none" || t === "off" || t === "0") return null;
  const m = t.match(/^(\d+(?:\.\d+)?)\s*([a-zµ]*)$/);
  const unit = m && m[2] && DURATION_UNITS[m[2]];
  if (!unit) throw new Error(`${what}: "${text}" is not a duration: give a number with a unit (ms, s, m, h, d, w), e.g. "30d"; "none" turns it off`);
  return Math.round(Number(m[1]) * unit);
}

/** Bytes → the shortest exact text parseSize reads back ("24 MiB", "1000 B"). */
export function sizeText(n) {
  if (n === null || n === undefined) return "";
  for (const [u, f] of [["TiB", 1024 ** 4], ["GiB", 1024 ** 3], ["MiB", 1024 ** 2], ["KiB", 1024]]) {
    if (n >= f && n % f === 0) return `${n / f} ${u}`;
  }
  return `${n} B`;
}

/** µs → the shortest exact text parseDuration reads back ("30d", "90m"). */
export function durationText(us) {
  if (us === null || us === undefined || us === 0) return "";
  for (const [u, f] of [["w", 604800e6], ["d", 86400e6], ["h", 3600e6], ["m", 60e6], ["s", 1e6], ["ms", 1e3]]) {
    if (us >= f && us % f === 0) return `${us / f}${u}`;
  }
  return `${us}us`;
}

/** A button that asks once more before it acts: the first click arms it, the second runs `action`. */
export function confirmButton(attrs, label, action) {
  const b = h("button", { ...attrs, class: `danger ${attrs.class || ""}`.trim(), type: "button", onclick: async () => {
    if (!b.classList.contains("armed")) {
      b.classList.add("armed");
      b.textContent = `Confirm: ${label.toLowerCase()}`;
      b.dataset.timer = String(setTimeout(() => { b.classList.remove("armed"); b.textContent = label; }, 5000));
      return;
    }
    clearTimeout(Number(b.dataset.timer));
    b.classList.remove("armed");
    b.textContent = label;
    await action();
  } }, label);
  return b;
}
