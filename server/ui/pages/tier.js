// The object-store tier: its status from /health (available, degraded, unavailable; the
// upload queue; the last error), the tier counters of /metrics, and per bucket the bytes and
// blocks kept only in the store with its tier settings. Refreshed every 2 s.
import { api } from "../api.js";
import { h, bytes, count, errorBox, sizeText, durationText } from "../util.js";

/** The `tsblob_tier_*` samples of a Prometheus text exposition, summed over labels. */
function tierMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line.startsWith("tsblob_tier_")) continue;
    const m = line.match(/^(tsblob_tier_[a-z_]+)(\{[^}]*\})?\s+([0-9.e+-]+)/);
    if (m) out.set(m[1], (out.get(m[1]) || 0) + Number(m[3]));
  }
  return out;
}

export async function render(main) {
  main.append(h("h1", {}, "Tier"));
  const state = h("div", { class: "card", id: "tier-state" });
  const counters = h("div", { class: "card", id: "tier-metrics" });
  const buckets = h("div", { class: "card", id: "tier-buckets" });
  main.append(state, buckets, counters);
  let stopped = false;
  let timer = null;
  const stat = (k, v, id) => h("div", { class: "stat", id }, h("div", { class: "v" }, v), h("div", { class: "k" }, k));

  async function refresh() {
    const [health, metrics, list] = await Promise.allSettled([api("/health"), api("/metrics"), api("/api/v1/b")]);
    if (stopped) return;
    state.replaceChildren(h("h2", {}, "Object store"));
    if (health.status === "rejected") state.append(errorBox(health.reason));
    else if (!health.value.tier) {
      state.append(h("p", { class: "muted", id: "tier-off" },
        "This server has no tier: start it with --tier-url (docs/scaling.md) to keep old blocks in an object store."));
    } else {
      const t = health.value.tier;
      state.append(h("div", { class: "stats" },
        stat("status", t.status, "tier-status"),
        stat("upload queue", count(t.upload_queue), "tier-queue"),
        stat("read replica", t.read_replica ? "yes" : "no")),
      t.error ? h("div", { class: "error", id: "tier-error", role: "alert" }, `last error: ${t.error}`)
        : h("p", { class: "muted" }, "No error."));
    }
    counters.replaceChildren(h("h2", {}, "Counters (/metrics)"));
    if (metrics.status === "rejected") counters.append(errorBox(metrics.reason));
    else {
      const m = tierMetrics(metrics.value);
      counters.append(m.size === 0 ? h("p", { class: "muted" }, "No tier metric on this server.") :
        h("div", { class: "scroll" }, h("table", { id: "tier-counters" }, h("tbody", {},
          [...m.entries()].map(([k, v]) => h("tr", {}, h("td", { class: "mono" }, k),
            h("td", { class: "num" }, /bytes/.test(k) ? bytes(v) : count(v))))))));
    }
    buckets.replaceChildren(h("h2", {}, "Buckets"));
    if (list.status === "rejected") { buckets.append(errorBox(list.reason)); return; }
    const bs = list.value.buckets;
    const tiered = bs.reduce((a, b) => a + (b.info.tiered_size || 0), 0);
    buckets.append(h("p", { id: "tier-total" }, `${bytes(tiered)} tiered in ${count(bs.length)} buckets`),
      h("div", { class: "scroll" }, h("table", { id: "tier-bucket-rows", class: "stack" },
        h("thead", {}, h("tr", {}, ...["bucket", "tiered", "tiered blocks", "size", "local max", "after"]
          .map((t) => h("th", { class: ["tiered", "tiered blocks", "size"].includes(t) ? "num" : "" }, t)))),
        h("tbody", {}, bs.map((b) => h("tr", { "data-bucket": b.name },
          h("td", { "data-label": "bucket" }, h("a", { href: `#/b/${encodeURIComponent(b.name)}` }, b.name)),
          h("td", { "data-label": "tiered", class: "num" }, bytes(b.info.tiered_size || 0)),
          h("td", { "data-label": "tiered blocks", class: "num" }, count(b.info.tiered_blocks || 0)),
          h("td", { "data-label": "size", class: "num" }, bytes(b.info.size)),
          h("td", { "data-label": "local max" }, sizeText(b.settings.tier_local_max) || "off"),
          h("td", { "data-label": "after" }, durationText(b.settings.tier_after) || "off")))))));
  }

  async function loop() {
    try { await refresh(); } catch (e) { if (!stopped) state.replaceChildren(errorBox(e)); }
    if (!stopped) timer = setTimeout(loop, 2000);
  }
  await loop();
  return () => { stopped = true; clearTimeout(timer); };
}
