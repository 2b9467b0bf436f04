// A bucket: its entries (records, size, oldest, latest), a form that creates an entry with
// its first record, removal of an entry or of the whole bucket (each asks once more), and
// its settings with sizes and durations in units ("24 MiB", "30d"), editable by a token
// with full access (the API checks it and its messages are shown as they come).
import { api, bucketPath, entryPath } from "../api.js";
import { h, bytes, count, time, errorBox, parseSize, parseDuration, sizeText, durationText, confirmButton } from "../util.js";
import { gauge } from "./overview.js";
import { lifecycleCard } from "./lifecycle.js";

export async function render(main, { bucket }) {
  const b = await api(bucketPath(bucket));
  const entryHref = (e) => `#/b/${encodeURIComponent(bucket)}/e/${e.split("/").map(encodeURIComponent).join("/")}`;
  const bucketStatus = h("div", { id: "bucket-status" });
  main.append(
    h("div", { class: "tl-head" },
      h("h1", {}, h("a", { href: "#/" }, "Buckets"), " / ", bucket),
      confirmButton({ id: "remove-bucket" }, "Remove bucket", async () => {
        bucketStatus.replaceChildren();
        try {
          await api(bucketPath(bucket), { method: "DELETE" });
          location.hash = "#/";
        } catch (e) { bucketStatus.append(errorBox(e)); }
      })),
    bucketStatus,
    h("div", { class: "stats" },
      ...[["records", count(b.info.record_count)], ["size", bytes(b.info.size)], ["blocks", count(b.info.block_count)],
        ["entries", count(b.info.entry_count)], ["evicted blocks", count(b.info.evicted_blocks)],
        ["expired blocks", count(b.info.expired_blocks)], ["tiered", bytes(b.info.tiered_size)]]
        .map(([k, v]) => h("div", { class: "stat" }, h("div", { class: "v" }, v), h("div", { class: "k" }, k))),
      h("div", { class: "stat" }, h("div", { class: "v" }, gauge(b)), h("div", { class: "k" }, "quota"))),
    h("br"),
  );
  const entries = b.entries || [];
  const entriesStatus = h("div", { id: "entries-status" });
  main.append(h("div", { class: "card" }, h("h2", {}, "Entries"), entriesStatus,
    entries.length === 0 ? h("p", { class: "muted" }, "No entry yet: the first write to an entry creates it.") :
      h("div", { class: "scroll" }, h("table", { id: "entries", class: "stack" },
        h("thead", {}, h("tr", {}, h("th", {}, "entry"), h("th", { class: "num" }, "records"), h("th", { class: "num" }, "size"),
          h("th", {}, "oldest"), h("th", {}, "latest"), h("th", {}, ""))),
        h("tbody", {}, entries.map((e) => h("tr", { "data-entry": e.name },
          h("td", { "data-label": "entry" }, h("a", { href: entryHref(e.name) }, e.name)),
          h("td", { class: "num", "data-label": "records" }, count(e.record_count)),
          h("td", { class: "num", "data-label": "size" }, bytes(e.size)),
          h("td", { class: "mono", "data-label": "oldest" }, time(e.oldest)),
          h("td", { class: "mono", "data-label": "latest" }, time(e.latest)),
          h("td", {}, confirmButton({ class: "remove-entry" }, "Remove", async () => {
            entriesStatus.replaceChildren();
            try {
              await api(entryPath(bucket, e.name), { method: "DELETE" });
              rerender();
            } catch (err) { entriesStatus.append(errorBox(err)); }
          })))))))));

  // A new entry: its first record (a file, or text).
  const newName = h("input", { id: "new-entry-name", placeholder: "robot1/front", required: true });
  const newFile = h("input", { id: "new-entry-file", type: "file" });
  const newText = h("input", { id: "new-entry-text", placeholder: "or a text payload" });
  const newStatus = h("div", { id: "new-entry-status" });
  main.append(h("div", { class: "card" }, h("h2", {}, "New entry"),
    h("p", { class: "muted" }, "An entry is created by its first record: pick a file (or type a text) to write now."),
    h("form", { class: "grid", id: "new-entry-form", onsubmit: async (ev) => {
      ev.preventDefault();
      newStatus.replaceChildren();
      const name = newName.value.trim();
      const file = newFile.files && newFile.files[0];
      const body = file || new Blob([newText.value], { type: "text/plain" });
      try {
        await api(entryPath(bucket, name), { method: "POST", body,
          extraHeaders: { "Content-Type": (file ? file.type : "text/plain") || "application/octet-stream" } });
        location.hash = entryHref(name);
      } catch (e) { newStatus.append(errorBox(e)); }
    } },
      h("label", { for: "new-entry-name" }, "entry name"), newName,
      h("label", { for: "new-entry-file" }, "first record"), newFile,
      h("label", { for: "new-entry-text" }, "text"), newText,
      h("div", { class: "actions row" }, h("button", { class: "primary", type: "submit", id: "new-entry-create" }, "Create entry"), newStatus))));

  function rerender() {
    main.replaceChildren();
    render(main, { bucket }).catch((e) => main.append(errorBox(e)));
  }

  // Settings: every field the API takes, sizes and durations with units.
  const s = b.settings;
  const f = {
    quota_type: h("select", { id: "set-quota-type" }, ["none", "fifo", "hard"].map((q) => h("option", { value: q }, q))),
    quota_size: h("input", { id: "set-quota-size", value: sizeText(s.quota_size), placeholder: "e.g. 10 GiB" }),
    max_block_size: h("input", { id: "set-block-size", value: sizeText(s.max_block_size), placeholder: "e.g. 64 MiB" }),
    max_block_records: h("input", { id: "set-block-records", type: "number", min: 0, value: s.max_block_records }),
    compression: h("input", { id: "set-compression", value: s.compression, placeholder: "none, zstd or zstd:<1-22>" }),
    max_age: h("input", { id: "set-max-age", value: durationText(s.max_age), placeholder: "off; e.g. 30d, 12h" }),
    tier_local_max: h("input", { id: "set-tier-local-max", value: sizeText(s.tier_local_max), placeholder: "off; e.g. 10 GiB" }),
    tier_after: h("input", { id: "set-tier-after", value: durationText(s.tier_after), placeholder: "off; e.g. 1d" }),
  };
  f.quota_type.value = s.quota_type;
  const show = (saved) => {
    f.quota_size.value = sizeText(saved.quota_size);
    f.max_block_size.value = sizeText(saved.max_block_size);
    f.max_block_records.value = saved.max_block_records;
    f.compression.value = saved.compression;
    f.max_age.value = durationText(saved.max_age);
    f.tier_local_max.value = sizeText(saved.tier_local_max);
    f.tier_after.value = durationText(saved.tier_after);
  };
  const status = h("div", { id: "settings-status" });
  const num = (el) => {
    const v = el.value.trim();
    return v === "" ? undefined : Number(v);
  };
  const off = (v) => (v === null ? "none" : v);
  const form = h("form", { class: "grid", id: "settings-form", onsubmit: async (ev) => {
    ev.preventDefault();
    status.replaceChildren();
    let body;
    try {
      body = {
        quota_type: f.quota_type.value,
        quota_size: parseSize(f.quota_size.value, "quota size") ?? (f.quota_size.value.trim() ? 0 : undefined),
        max_block_size: parseSize(f.max_block_size.value, "max block size") ?? undefined,
        max_block_records: num(f.max_block_records),
        compression: f.compression.value.trim(),
        // An empty field turns retention and tiering off (they are off when the answer is null).
        max_age: off(parseDuration(f.max_age.value, "max age") ?? null),
        tier_local_max: off(parseSize(f.tier_local_max.value, "tier local max") ?? null),
        tier_after: off(parseDuration(f.tier_after.value, "tier after") ?? null),
      };
    } catch (e) {
      status.append(errorBox(e));
      return;
    }
    try {
      const saved = await api(bucketPath(bucket), { method: "PUT", json: body });
      show(saved.settings);
      status.append(h("div", { class: "notice" }, "Saved."));
    } catch (e) {
      status.append(errorBox(e));
    }
  } },
    h("label", { for: "set-quota-type" }, "quota type"), f.quota_type,
    h("label", { for: "set-quota-size" }, "quota size"), f.quota_size,
    h("label", { for: "set-block-size" }, "max block size"), f.max_block_size,
    h("label", { for: "set-block-records" }, "max block records"), f.max_block_records,
    h("label", { for: "set-compression" }, "compression"), f.compression,
    h("label", { for: "set-max-age" }, "max age (retention)"), f.max_age,
    h("label", { for: "set-tier-local-max" }, "tier: local max"), f.tier_local_max,
    h("label", { for: "set-tier-after" }, "tier: after"), f.tier_after,
    h("div", { class: "actions row" }, h("button", { class: "primary", type: "submit", id: "settings-save" }, "Save settings"), status),
  );
  main.append(h("div", { class: "card" }, h("h2", {}, "Settings"),
    h("p", { class: "muted" }, "Sizes take units (24 MiB, 10 GB), durations too (30d, 12h, 90s); an empty max age or tier field turns it off. Changing settings needs a token with full access; the server checks every value."), form));
  main.append(await lifecycleCard(bucket));
}
