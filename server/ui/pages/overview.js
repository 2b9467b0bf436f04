// Overview: the server (version, usage, free space, write rate) and every bucket the token
// may read (size, records, quota gauge, evictions). Refreshed every 2 s.
import { api, ApiError } from "../api.js";
import { h, bytes, count, time, errorBox, parseSize } from "../util.js";

export function gauge(b) {
  if (b.settings.quota_type === "none" || !b.settings.quota_size) return h("span", { class: "muted" }, "no quota");
  const used = b.info.quota_used ?? b.info.size / b.settings.quota_size;
  const pct = Math.min(100, used * 100);
  const cls = "gauge" + (pct >= 95 ? " full" : pct >= 80 ? " warn" : "");
  return h("span", { class: "row", title: `${bytes(b.info.size)} of ${bytes(b.settings.quota_size)}` },
    h("span", { class: cls }, h("span", { style: { width: `${pct.toFixed(1)}%` } })),
    h("span", {}, `${pct.toFixed(pct < 10 ? 1 : 0)}% of ${bytes(b.settings.quota_size)} ${b.settings.quota_type.toUpperCase()}`));
}

/** Sums of the write counters of a Prometheus text exposition. */
function writeCounters(text) {
  let writes = 0;
  let received = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("tsblob_http_requests_total{")) {
      const m = line.match(/op="([^"]*)".*status="(\d+)"\}\s+([0-9.e+]+)/);
      if (m && (m[1] === "record_write" || m[1] === "batch") && m[2].startsWith("2")) writes += Number(m[3]);
    } else if (line.startsWith("tsblob_http_received_bytes_total ")) {
      received = Number(line.split(/\s+/)[1]);
    }
  }
  return { writes, received, at: performance.now() };
}

export async function render(main) {
  main.append(h("h1", {}, "Overview"));
  const server = h("div", { class: "stats", id: "server-stats" });
  const bucketsCard = h("div", { class: "card" });
  main.append(h("div", { class: "card" }, h("h2", {}, "Server"), server), bucketsCard, createForm());
  let prev = null;
  let rate = null;
  let stopped = false;
  let timer = null;

  const stat = (k, v, id) => h("div", { class: "stat", id }, h("div", { class: "v" }, v), h("div", { class: "k" }, k));

  async function refresh() {
    const [info, metrics, list] = await Promise.allSettled([
      api("/api/v1/info"),
      api("/metrics"),
      api("/api/v1/b"),
    ]);
    if (stopped) return;
    if (metrics.status === "fulfilled") {
      const now = writeCounters(metrics.value);
      if (prev) {
        const dt = (now.at - prev.at) / 1000;
        if (dt > 0) rate = { writes: (now.writes - prev.writes) / dt, bytes: (now.received - prev.received) / dt };
      }
      prev = now;
    }
    server.replaceChildren();
    if (info.status === "fulfilled") {
      const i = info.value;
      server.append(
        stat("version", i.version),
        stat("uptime", `${Math.floor(i.uptime_s / 3600)} h ${Math.floor((i.uptime_s % 3600) / 60)} min`),
        stat("buckets", count(i.bucket_count)),
        stat("records", count(i.record_count), "stat-records"),
        stat("on disk", bytes(i.usage)),
        stat("disk free", bytes(i.free_bytes), "stat-free"),
        stat("sync", i.sync),
      );
    } else {
      const e = info.reason;
      server.append(e instanceof ApiError && e.status === 403
        ? h("p", { class: "muted" }, "Server-wide figures need a token with full access or read access to every bucket.")
        : errorBox(e));
    }
    if (metrics.status === "fulfilled") {
      server.append(
        stat("writes / s", rate ? rate.writes.toFixed(1) : "…", "stat-write-rate"),
        stat("received / s", rate ? bytes(Math.round(rate.bytes)) : "…"),
      );
    }
    bucketsCard.replaceChildren(h("h2", {}, "Buckets"));
    if (list.status === "rejected") { bucketsCard.append(errorBox(list.reason)); return; }
    const buckets = list.value.buckets;
    if (!buckets.length) { bucketsCard.append(h("p", { class: "muted" }, "No bucket yet (or none this token may read).")); return; }
    bucketsCard.append(h("div", { class: "scroll" }, h("table", { id: "buckets" },
      h("thead", {}, h("tr", {},
        h("th", {}, "bucket"), h("th", { class: "num" }, "records"), h("th", { class: "num" }, "size"),
        h("th", {}, "quota"), h("th", { class: "num" }, "evicted blocks"),
        h("th", { class: "hide-narrow" }, "latest"))),
      h("tbody", {}, buckets.map((b) => h("tr", {},
        h("td", {}, h("a", { href: `#/b/${encodeURIComponent(b.name)}` }, b.name)),
        h("td", { class: "num" }, count(b.info.record_count)),
        h("td", { class: "num" }, bytes(b.info.size)),
        h("td", {}, gauge(b)),
        h("td", { class: "num" }, count(b.info.evicted_blocks)),
        h("td", { class: "hide-narrow mono" }, time(b.info.latest))))))));
  }

  async function loop() {
    try { await refresh(); } catch (e) { if (!stopped) bucketsCard.replaceChildren(errorBox(e)); }
    if (!stopped) timer = setTimeout(loop, 2000);
  }
  await loop();
  return () => { stopped = true; clearTimeout(timer); };
}

/** A new bucket: its name, quota (with units) and compression; the API checks the rest. */
function createForm() {
  const name = h("input", { id: "new-bucket-name", placeholder: "cams", required: true });
  const quotaType = h("select", { id: "new-bucket-quota-type" }, ["none", "fifo", "hard"].map((q) => h("option", { value: q }, q)));
  const quotaSize = h("input", { id: "new-bucket-quota-size", placeholder: "e.g. 10 GiB" });
  const status = h("div", { id: "new-bucket-status" });
  return h("div", { class: "card" }, h("h2", {}, "New bucket"),
    h("form", { class: "grid", id: "new-bucket-form", onsubmit: async (ev) => {
      ev.preventDefault();
      status.replaceChildren();
      const n = name.value.trim();
      try {
        const body = { quota_type: quotaType.value };
        const size = parseSize(quotaSize.value, "quota size");
        if (size) body.quota_size = size;
        await api(`/api/v1/b/${encodeURIComponent(n)}`, { method: "POST", json: body });
        location.hash = `#/b/${encodeURIComponent(n)}`;
      } catch (e) { status.append(errorBox(e)); }
    } },
      h("label", { for: "new-bucket-name" }, "name"), name,
      h("label", { for: "new-bucket-quota-type" }, "quota type"), quotaType,
      h("label", { for: "new-bucket-quota-size" }, "quota size"), quotaSize,
      h("div", { class: "actions row" }, h("button", { class: "primary", type: "submit", id: "new-bucket-create" }, "Create bucket"), status)),
    h("p", { class: "muted" }, "Settings (retention, tiering, compression) are on the bucket's page once it exists."));
}
