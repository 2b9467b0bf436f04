// An entry: the timeline of its records, the records of the window shown, a preview of
// the selected one, label filters (and a `when` condition where the server has them),
// a live view that appends records as they are written (the timeline follows it), and the
// arrow keys to step through the records (frames), and bulk edits of the records of the
// window or of those ticked in the list (`bulk.js`). On a phone the rows stack with their
// column names and the preview opens right under the selected row.
import { api, entryPath, queryRecords, histogram, capabilities } from "../api.js";
import { h, bytes, count, time, labelsText, errorBox, duration } from "../util.js";
import { Timeline } from "../timeline.js";
import { attachmentsCard } from "./attachments.js";
import { bulkCard } from "./bulk.js";

const PAGE = 100;
const MAX_ROWS = 1000;
const LIVE_MS = 500;
const PREVIEW_BYTES = 512;
const TEXT_MAX = 256 << 10;
const IMAGE = /^image\/(jpeg|png|webp|gif)$/;
// The most of one record the console holds in the browser's memory: a larger image is not
// previewed, and a larger download goes through a query link the browser saves as it
// arrives (a writer's multi-gigabyte `image/*` record took the memory of whoever opened it).
const IMAGE_MAX = 32 << 20;
const BLOB_MAX = 64 << 20;
// The extension a downloaded record is saved with, by content type; any other type: `.bin`
// (as query links name their files).
const SAVE_AS = {
  "image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp", "image/avif": "avif",
  "image/bmp": "bmp", "image/tiff": "tiff", "text/plain": "txt", "text/csv": "csv",
  "application/json": "json", "application/x-ndjson": "ndjson", "application/cbor": "cbor",
  "application/zstd": "zst", "application/octet-stream": "bin", "video/mp4": "mp4", "video/webm": "webm",
  "audio/mpeg": "mp3", "audio/ogg": "ogg", "audio/wav": "wav", "application/x-protobuf": "pb",
};
const FOLLOW_MIN_SPAN = 60e6; // the live timeline shows at least the last minute
const FOLLOW_MS = 1000; // and is redrawn at most once a second
const narrow = () => window.matchMedia("(max-width: 800px)").matches;
const TEXTUAL = /^(text\/|application\/(json|xml|x-ndjson|javascript)|[^;]*\+(json|xml))/;

export async function render(main, params) {
  const { bucket, entry } = params;
  const path = entryPath(bucket, entry);
  const caps = await capabilities();
  const info = await api(`${path}/info`);
  let stopped = false;
  let urls = [];
  const revoke = () => { for (const u of urls) URL.revokeObjectURL(u); urls = []; };

  // Header
  const infoLine = h("p", { class: "muted", id: "entry-info" });
  const showInfo = (i) => infoLine.replaceChildren(
    `${count(i.record_count)} records, ${bytes(i.size)}, ${time(i.oldest)} → ${time(i.latest)} (UTC)`);
  showInfo(info);
  main.append(h("h1", {},
    h("a", { href: "#/" }, "Buckets"), " / ",
    h("a", { href: `#/b/${encodeURIComponent(bucket)}` }, bucket), " / ", entry), infoLine);

  // Timeline
  const canvas = h("canvas", { class: "timeline", id: "timeline", "aria-label": "records over time" });
  const windowLabel = h("span", { class: "mono", id: "window" });
  const tlError = h("div");
  const whole = () => {
    if (info.oldest === null) { const now = Date.now() * 1000; return { start: now - 3600e6, stop: now }; }
    return { start: info.oldest, stop: info.latest + 1 };
  };
  let view = whole();
  const timeline = new Timeline(canvas, (start, stop) => { view = { start, stop }; load(); });
  main.append(h("div", { class: "card" },
    h("div", { class: "tl-head" }, h("h2", {}, "Timeline"), windowLabel,
      h("div", { class: "row" },
        h("button", { id: "zoom-out", onclick: () => {
          const span = view.stop - view.start;
          view = { start: Math.max(0, view.start - span), stop: view.stop + span };
          timeline.pending = view;
          load();
        } }, "Zoom out"),
        h("button", { id: "zoom-all", onclick: () => { view = whole(); timeline.pending = view; load(); } }, "Whole entry"))),
    canvas, tlError,
    h("p", { class: "muted" }, "Drag across the timeline to zoom into a range; scroll to zoom around the pointer.")));

  // Filters
  const filterInput = h("input", { id: "filter-labels", class: "grow", placeholder: "label filters: key=value key2=value2" });
  const whenInput = caps.when ? h("textarea", { id: "filter-when", rows: 2, placeholder: "when condition (JSON), e.g. {\"&score\": {\"$gt\": 10}}" }) : null;
  const liveButton = h("button", { id: "live", onclick: () => toggleLive() }, "Live");
  main.append(h("form", { class: "card", id: "filters", onsubmit: (ev) => { ev.preventDefault(); loadRecords(); } },
    h("div", { class: "row" }, filterInput, h("button", { type: "submit", class: "primary" }, "Apply"), liveButton),
    whenInput));
  const filters = () => filterInput.value.split(/[\s,]+/).filter((s) => s.includes("="))
    .map((s) => [s.slice(0, s.indexOf("=")), s.slice(s.indexOf("=") + 1)]);
  const when = () => (whenInput && whenInput.value.trim()) || undefined;

  // Records and preview
  const tbody = h("tbody", { id: "record-rows" });
  const listStatus = h("div", { id: "list-status" });
  const more = h("button", { id: "more", hidden: true, onclick: () => loadRecords(true) }, "Load more");
  const preview = h("div", { class: "preview", id: "preview" }, h("p", { class: "muted" }, "Select a record to preview it."));
  const previewCard = h("div", { class: "card", id: "preview-card" }, h("h2", {}, "Preview"), preview);
  // On a phone the preview sits in a row right under the selected one.
  const previewRow = h("tr", { class: "preview-row", id: "preview-row" }, h("td", { colspan: 4 }));
  function placePreview(tr) {
    if (narrow() && tr && tr.isConnected) {
      tr.after(previewRow);
      previewRow.firstChild.append(preview);
      previewCard.hidden = true;
    } else {
      previewRow.remove();
      previewCard.append(preview);
      previewCard.hidden = false;
    }
  }
  main.append(h("div", { class: "split" },
    h("div", { class: "card" }, h("h2", {}, "Records"),
      h("div", { class: "records scroll" }, h("table", { id: "records", class: "stack" },
        h("thead", {}, h("tr", {}, h("th", {}, "timestamp (UTC)"), h("th", { class: "num" }, "size"),
          h("th", {}, "content type"), h("th", {}, "labels"))), tbody)),
      listStatus, more,
      h("p", { class: "muted" }, "← ↑ / → ↓ step through the records.")),
    previewCard));

  // Records ticked for a bulk edit (timestamps of rows in the list).
  const picked = new Set();
  const bulk = bulkCard(path, {
    windowShown: () => view,
    picked: () => [...picked].sort((a, b) => a - b),
    changed: () => { picked.clear(); bulk.update(); load(); },
  });
  main.append(bulk);
  main.append(attachmentsCard(path));

  let rows = [];
  let selected = null;

  function row(r) {
    const tick = h("input", { type: "checkbox", class: "pick", "aria-label": "tick for a bulk edit",
      checked: picked.has(r.ts),
      onclick: (ev) => { ev.stopPropagation(); if (tick.checked) picked.add(r.ts); else picked.delete(r.ts); bulk.update(); } });
    const tr = h("tr", { class: "click", "data-ts": String(r.ts), onclick: () => select(r, tr) },
      h("td", { class: "mono", title: `${r.ts} µs`, "data-label": "timestamp" }, tick, time(r.ts)),
      h("td", { class: "num", "data-label": "size" }, bytes(r.size)),
      h("td", { "data-label": "content type" }, r.content_type),
      h("td", { class: "labels", "data-label": "labels" }, labelsText(r.labels) || "–"));
    r.tr = tr;
    return tr;
  }

  function addRows(records) {
    for (const r of records) { rows.push(r); tbody.append(row(r)); }
    while (rows.length > MAX_ROWS) { const r = rows.shift(); r.tr.remove(); picked.delete(r.ts); }
  }

  let listSeq = 0;
  async function loadRecords(append = false) {
    const seq = ++listSeq;
    listStatus.replaceChildren();
    const from = append && rows.length ? rows[rows.length - 1].ts + 1 : view.start;
    try {
      const recs = await queryRecords(bucket, entry, { start: from, stop: view.stop, limit: PAGE, filters: filters(), when: when() });
      if (stopped || seq !== listSeq) return;
      if (!append) { rows = []; tbody.replaceChildren(); picked.clear(); }
      addRows(recs.map(({ payload, ...meta }) => meta));
      more.hidden = recs.length < PAGE;
      bulk.update();
      if (!rows.length) listStatus.append(h("p", { class: "muted" }, "No record in this window."));
    } catch (e) {
      if (!stopped && seq === listSeq) listStatus.append(errorBox(e));
    }
  }

  let histSeq = 0;
  async function loadHistogram() {
    const seq = ++histSeq;
    tlError.replaceChildren();
    const span = Math.max(1, view.stop - view.start);
    const step = Math.max(1, Math.ceil(span / timeline.bars()));
    try {
      const hist = await histogram(bucket, entry, { start: view.start, stop: view.stop, step });
      if (stopped || seq !== histSeq) return;
      timeline.set(hist);
      canvas.dataset.start = String(hist.start);
      canvas.dataset.stop = String(hist.stop);
      windowLabel.replaceChildren(`${time(hist.start)} → ${time(hist.stop)} · ${count(hist.counts.reduce((a, b) => a + b, 0))} records · step ${duration(hist.step)}`);
    } catch (e) {
      if (!stopped && seq === histSeq) tlError.append(errorBox(e));
    }
  }

  function load() { return Promise.all([loadHistogram(), loadRecords()]); }

  async function select(r, tr, payload) {
    if (selected && selected.tr) selected.tr.classList.remove("sel");
    selected = r;
    if (tr) tr.classList.add("sel");
    placePreview(tr);
    revoke();
    const media = h("div", { class: "media", id: "preview-media" }, h("p", { class: "muted" }, "Loading…"));
    const status = h("div", { id: "preview-status" });
    const del = h("button", { class: "danger", id: "delete-record", onclick: () => removeRecord(r, del, status) }, "Delete");
    preview.replaceChildren(
      h("dl", { class: "meta" },
        h("dt", {}, "timestamp"), h("dd", { class: "mono" }, `${time(r.ts)} (${r.ts})`),
        h("dt", {}, "size"), h("dd", {}, `${bytes(r.size)} (${count(r.size)} bytes)`),
        h("dt", {}, "content type"), h("dd", {}, r.content_type),
        h("dt", {}, "labels"), h("dd", { class: "labels" }, labelsText(r.labels, true) || "–")),
      h("div", { class: "row" }, h("button", { id: "download", onclick: () => download(r, status) }, "Download"),
        h("button", { id: "share-link", title: "A link that downloads this record without a token, for 24 hours",
          onclick: () => share(r, status) }, "Share link"), del),
      status, media);
    try {
      await showPayload(r, media, payload);
    } catch (e) {
      media.replaceChildren(errorBox(e));
    }
  }

  async function showPayload(r, media, payload) {
    const ct = (r.content_type || "").split(";")[0].trim().toLowerCase();
    if (IMAGE.test(ct) && !payload && r.size > IMAGE_MAX) {
      media.replaceChildren(h("p", { class: "notice", id: "preview-too-large" },
        `An image of ${bytes(r.size)}: larger than the ${bytes(IMAGE_MAX)} this console previews; download it instead.`));
      return;
    }
    if (IMAGE.test(ct)) {
      // The blob's type is the image type matched above, never the answer's: a record of
      // type `image/png;,text/html` made `Response.blob()` a `text/html` blob, which
      // opened in a tab ran as a page of this console's origin (browser probe of
      // 2026-11-29).
      const data = payload || await (await api(`${path}?ts=${r.ts}`, { raw: true })).arrayBuffer();
      const blob = new Blob([data], { type: ct });
      const url = URL.createObjectURL(blob);
      urls.push(url);
      const img = h("img", { id: "preview-image", src: url, alt: `record ${r.ts}` });
      media.replaceChildren(img);
      return;
    }
    const limit = TEXTUAL.test(ct) ? TEXT_MAX : PREVIEW_BYTES;
    const head = payload ? payload.subarray(0, limit) : await firstBytes(`${path}?ts=${r.ts}`, limit);
    if (TEXTUAL.test(ct)) {
      let text = new TextDecoder().decode(head);
      if (ct.includes("json") && r.size <= TEXT_MAX) {
        try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* show as it is */ }
      }
      const cut = r.size > head.length ? `\n… (${count(r.size - head.length)} more bytes: download to see all)` : "";
      media.replaceChildren(h("pre", { id: "preview-text" }, text + cut));
      return;
    }
    media.replaceChildren(h("pre", { id: "preview-hex" }, hexdump(head) +
      (r.size > head.length ? `\n… first ${head.length} of ${count(r.size)} bytes` : "")));
  }

  async function firstBytes(url, n) {
    const resp = await api(url, { raw: true });
    const reader = resp.body.getReader();
    const parts = [];
    let got = 0;
    while (got < n) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      got += value.length;
    }
    reader.cancel().catch(() => {});
    const out = new Uint8Array(Math.min(n, got));
    let o = 0;
    for (const p of parts) { const take = Math.min(p.length, out.length - o); out.set(p.subarray(0, take), o); o += take; }
    return out;
  }

  async function download(r, status) {
    status.replaceChildren();
    try {
      if (r.size > BLOB_MAX) {
        // Saved by the browser as it arrives, through a short-lived query link (the same
        // as "Share link"), instead of whole in this page's memory.
        const made = await api("/api/v1/links", { method: "POST",
          json: { bucket, entry, record: { entry, ts: r.ts }, expires_in: 600 } });
        const a = h("a", { href: made.link, download: "" });
        document.body.append(a);
        a.click();
        a.remove();
        return;
      }
      // Typed as bytes whatever the record's type (see showPayload).
      const blob = new Blob([await (await api(`${path}?ts=${r.ts}`, { raw: true })).arrayBuffer()],
        { type: "application/octet-stream" });
      const url = URL.createObjectURL(blob);
      // The writer chose the content type: only passive types name their extension (an
      // `.html`, `.svg` or `.exe` saved from a hostile record would run when opened).
      const ext = SAVE_AS[r.content_type.split(";")[0].trim().toLowerCase()] || "bin";
      const a = h("a", { href: url, download: `${entry.replaceAll("/", "_")}-${r.ts}.${ext}` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      status.append(errorBox(e));
    }
  }

  // A query link to this record (POST /api/v1/links, docs/api.md): valid 24 hours, without a
  // token, as the signed-in token (it stops working when that token is removed).
  async function share(r, status) {
    status.replaceChildren();
    try {
      const made = await api("/api/v1/links", { method: "POST",
        json: { bucket, entry, record: { entry, ts: r.ts }, expires_in: 86400 } });
      const field = h("input", { id: "share-link-url", class: "mono", readonly: true, value: made.link,
        onfocus: (e) => e.target.select() });
      status.append(h("div", { class: "row" }, field,
        h("span", { class: "muted" }, `until ${time(made.expires_at)}`)));
      field.focus();
      if (navigator.clipboard) navigator.clipboard.writeText(made.link).catch(() => {});
    } catch (e) {
      status.append(errorBox(e));
    }
  }

  async function removeRecord(r, button, status) {
    if (!button.classList.contains("armed")) {
      button.classList.add("armed");
      button.textContent = "Confirm delete";
      return;
    }
    button.classList.remove("armed");
    button.textContent = "Delete";
    status.replaceChildren();
    try {
      await api(`${path}?ts=${r.ts}`, { method: "DELETE" });
      r.tr.remove();
      rows = rows.filter((x) => x !== r);
      picked.delete(r.ts);
      bulk.update();
      preview.replaceChildren(h("p", { class: "notice" }, `Record ${r.ts} removed.`));
      loadHistogram();
    } catch (e) {
      status.append(errorBox(e));
    }
  }

  // Arrow keys step through the records (not while typing in a field).
  function step(delta) {
    if (!rows.length) return;
    const i = selected ? rows.indexOf(selected) : -1;
    const next = rows[i < 0 ? (delta > 0 ? 0 : rows.length - 1) : Math.min(rows.length - 1, Math.max(0, i + delta))];
    if (!next || next === selected) return;
    select(next, next.tr);
    next.tr.scrollIntoView({ block: "nearest" });
  }
  const onKey = (ev) => {
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.defaultPrevented) return;
    if (ev.target && ev.target.closest && ev.target.closest("input, textarea, select, [contenteditable]")) return;
    const delta = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1 }[ev.key];
    if (!delta) return;
    ev.preventDefault();
    step(delta);
  };
  document.addEventListener("keydown", onKey);

  // The timeline follows the live view: its window ends at the newest record.
  let followAt = 0;
  let followTimer = null;
  function follow(newest) {
    const span = Math.max(FOLLOW_MIN_SPAN, view.stop - view.start);
    if (newest < view.stop) return;
    view = { start: Math.max(0, newest + 1 - span), stop: newest + 1 };
    timeline.pending = view;
    canvas.dataset.stop = String(view.stop);
    // At most once a second, and once more after the last record (trailing).
    clearTimeout(followTimer);
    const wait = Math.max(0, FOLLOW_MS - (performance.now() - followAt));
    followTimer = setTimeout(() => { followAt = performance.now(); loadHistogram(); }, wait);
  }

  // Live view: poll from the last timestamp + 1 every 500 ms, one request at a time.
  let live = null;
  async function tick() {
    if (!live || stopped) return;
    try {
      const recs = await queryRecords(bucket, entry, {
        start: live.after + 1, limit: 50, filters: filters(), when: when(), payloads: true,
      });
      if (!live || stopped) return;
      if (recs.length) {
        live.after = recs[recs.length - 1].ts;
        addRows(recs.map(({ payload, ...meta }) => meta));
        const newest = recs[recs.length - 1];
        follow(newest.ts);
        const r = rows[rows.length - 1];
        r.tr.scrollIntoView({ block: "nearest" });
        const image = [...recs].reverse().find((x) => IMAGE.test(x.content_type));
        if (image) {
          const target = rows.find((x) => x.ts === image.ts);
          if (target) select(target, target.tr, image.payload && image.payload.length === image.size ? image.payload : undefined);
        } else if (newest) {
          listStatus.replaceChildren(h("p", { class: "muted" }, `live: newest ${time(newest.ts)}`));
        }
      }
      if (recs.skipped) {
        // Damaged records the server skipped (their payload fails its check).
        const s = recs.skipped;
        const named = s.skipped.map((x) => `${time(x.ts)} (${x.code})`).join(", ");
        listStatus.append(h("p", { class: "muted" }, `${count(s.skipped_count)} damaged record(s) skipped: ${named}`));
      }
    } catch (e) {
      listStatus.replaceChildren(errorBox(e));
    }
    if (live && !stopped) live.timer = setTimeout(tick, LIVE_MS);
  }

  async function toggleLive() {
    if (live) {
      clearTimeout(live.timer);
      live = null;
      liveButton.classList.remove("on");
      liveButton.textContent = "Live";
      return;
    }
    let after = rows.length ? rows[rows.length - 1].ts : 0;
    try {
      const i = await api(`${path}/info`);
      showInfo(i);
      if (i.latest !== null) after = Math.max(after, i.latest);
    } catch (_) { /* keep the rows' last */ }
    live = { after, timer: null };
    liveButton.classList.add("on");
    liveButton.textContent = "Live: on";
    tick();
  }

  await load();
  return () => {
    stopped = true;
    document.removeEventListener("keydown", onKey);
    clearTimeout(followTimer);
    if (live) clearTimeout(live.timer);
    live = null;
    timeline.destroy();
    revoke();
  };
}

function hexdump(b) {
  const lines = [];
  for (let i = 0; i < b.length; i += 16) {
    const chunk = b.subarray(i, i + 16);
    const hex = [...chunk].map((x) => x.toString(16).padStart(2, "0")).join(" ");
    const asc = [...chunk].map((x) => (x >= 32 && x < 127 ? String.fromCharCode(x) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${asc}`);
  }
  return lines.join("\n");
}
