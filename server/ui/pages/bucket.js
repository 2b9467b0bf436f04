// A bucket: its entries (records, size, oldest, latest) and its settings, editable by a
// token with full access (the API checks it and its messages are shown as they come).
import { api, bucketPath } from "../api.js";
import { h, bytes, count, time, errorBox } from "../util.js";
import { gauge } from "./overview.js";

export async function render(main, { bucket }) {
  const b = await api(bucketPath(bucket));
  const entryHref = (e) => `#/b/${encodeURIComponent(bucket)}/e/${e.split("/").map(encodeURIComponent).join("/")}`;
  main.append(
    h("h1", {}, h("a", { href: "#/" }, "Buckets"), " / ", bucket),
    h("div", { class: "stats" },
      ...[["records", count(b.info.record_count)], ["size", bytes(b.info.size)], ["blocks", count(b.info.block_count)],
        ["entries", count(b.info.entry_count)], ["evicted blocks", count(b.info.evicted_blocks)]]
        .map(([k, v]) => h("div", { class: "stat" }, h("div", { class: "v" }, v), h("div", { class: "k" }, k))),
      h("div", { class: "stat" }, h("div", { class: "v" }, gauge(b)), h("div", { class: "k" }, "quota"))),
    h("br"),
  );
  const entries = b.entries || [];
  main.append(h("div", { class: "card" }, h("h2", {}, "Entries"),
    entries.length === 0 ? h("p", { class: "muted" }, "No entry yet: the first write to an entry creates it.") :
      h("div", { class: "scroll" }, h("table", { id: "entries" },
        h("thead", {}, h("tr", {}, h("th", {}, "entry"), h("th", { class: "num" }, "records"), h("th", { class: "num" }, "size"),
          h("th", {}, "oldest"), h("th", {}, "latest"))),
        h("tbody", {}, entries.map((e) => h("tr", {},
          h("td", {}, h("a", { href: entryHref(e.name) }, e.name)),
          h("td", { class: "num" }, count(e.record_count)),
          h("td", { class: "num" }, bytes(e.size)),
          h("td", { class: "mono" }, time(e.oldest)),
          h("td", { class: "mono" }, time(e.latest)))))))));

  // Settings
  const s = b.settings;
  const f = {
    quota_type: h("select", { id: "set-quota-type" }, ["none", "fifo", "hard"].map((q) => h("option", { value: q }, q))),
    quota_size: h("input", { id: "set-quota-size", type: "number", min: 0, value: s.quota_size }),
    max_block_size: h("input", { id: "set-block-size", type: "number", min: 0, value: s.max_block_size }),
    max_block_records: h("input", { id: "set-block-records", type: "number", min: 0, value: s.max_block_records }),
    compression: h("input", { id: "set-compression", value: s.compression, placeholder: "none, zstd or zstd:<1-22>" }),
  };
  f.quota_type.value = s.quota_type;
  const status = h("div", { id: "settings-status" });
  const num = (el) => {
    const v = el.value.trim();
    return v === "" ? undefined : Number(v);
  };
  const form = h("form", { class: "grid", id: "settings-form", onsubmit: async (ev) => {
    ev.preventDefault();
    status.replaceChildren();
    const body = {
      quota_type: f.quota_type.value,
      quota_size: num(f.quota_size),
      max_block_size: num(f.max_block_size),
      max_block_records: num(f.max_block_records),
      compression: f.compression.value.trim(),
    };
    try {
      const saved = await api(bucketPath(bucket), { method: "PUT", json: body });
      f.compression.value = saved.settings.compression;
      status.append(h("div", { class: "notice" }, "Saved."));
    } catch (e) {
      status.append(errorBox(e));
    }
  } },
    h("label", { for: "set-quota-type" }, "quota type"), f.quota_type,
    h("label", { for: "set-quota-size" }, "quota size (bytes)"), f.quota_size,
    h("label", { for: "set-block-size" }, "max block size (bytes)"), f.max_block_size,
    h("label", { for: "set-block-records" }, "max block records"), f.max_block_records,
    h("label", { for: "set-compression" }, "compression"), f.compression,
    h("div", { class: "actions row" }, h("button", { class: "primary", type: "submit", id: "settings-save" }, "Save settings"), status),
  );
  main.append(h("div", { class: "card" }, h("h2", {}, "Settings"),
    h("p", { class: "muted" }, "Changing settings needs a token with full access; the server checks every value."), form));
}
