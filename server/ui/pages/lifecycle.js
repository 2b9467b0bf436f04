// A bucket's lifecycle rules (records removed, or stored zstd-compressed, once older than an
// age): a table with what each did, "Run now" and removal per rule, and a form that adds or
// replaces one (durations with units, entries comma-separated with "!" excluding, a `when` as
// JSON, the action).
// The bucket's max age is the rule "max_age" (shown first; set it in the settings).
import { api } from "../api.js";
import { h, bytes, count, time, errorBox, parseDuration, durationText, confirmButton } from "../util.js";

const rulesPath = (bucket, name) =>
  `/api/v1/lifecycle/${encodeURIComponent(bucket)}` + (name === undefined ? "" : `/${encodeURIComponent(name)}`);

export async function lifecycleCard(bucket) {
  const card = h("div", { class: "card", id: "lifecycle" });
  const status = h("div", { id: "lifecycle-status" });
  const body = h("div", {});
  const f = {
    name: h("input", { id: "lc-name", placeholder: "cold-raw", required: true }),
    older_than: h("input", { id: "lc-older-than", placeholder: "e.g. 30d", required: true }),
    interval: h("input", { id: "lc-interval", placeholder: "1h" }),
    entries: h("input", { id: "lc-entries", placeholder: "every entry; e.g. cams/*, !cams/raw" }),
    when: h("input", { id: "lc-when", placeholder: "every record; e.g. {\"&kind\": {\"$eq\": \"raw\"}}" }),
    mode: h("select", { id: "lc-mode" }, ["enabled", "disabled", "dry_run"].map((m) => h("option", { value: m }, m))),
    action: h("select", { id: "lc-action" }, ["remove", "compress"].map((m) => h("option", { value: m }, m))),
  };
  // What a rule (or one run of it) did: records removed, or compressed and the bytes saved.
  const did = (action, removed, compressed, saved) => action === "compress"
    ? `compressed ${count(compressed)} records (${bytes(saved)} saved)`
    : `removed ${count(removed)} records`;

  async function refresh() {
    body.replaceChildren();
    let rules;
    try {
      rules = (await api(rulesPath(bucket))).rules;
    } catch (e) {
      body.append(errorBox(e));
      return;
    }
    if (rules.length === 0) {
      body.append(h("p", { class: "muted" }, "No rule: records stay until removed (or evicted by a FIFO quota)."));
      return;
    }
    body.append(h("div", { class: "scroll" }, h("table", { id: "lifecycle-rules", class: "stack" },
      h("thead", {}, h("tr", {}, ...["rule", "action", "older than", "every", "entries", "when", "mode", "done", "last run", ""]
        .map((t) => h("th", {}, t)))),
      h("tbody", {}, rules.map((r) => h("tr", { "data-rule": r.name },
        h("td", { "data-label": "rule" }, r.name + (r.shorthand ? " (max age)" : "")),
        h("td", { "data-label": "action" }, r.action),
        h("td", { "data-label": "older than" }, durationText(r.older_than)),
        h("td", { "data-label": "every" }, durationText(r.interval)),
        h("td", { class: "mono", "data-label": "entries" }, r.entries.length ? r.entries.join(", ") : "all"),
        h("td", { class: "mono", "data-label": "when" }, r.when ? JSON.stringify(r.when) : "–"),
        h("td", { "data-label": "mode" }, r.mode),
        h("td", { class: "num", "data-label": "done" },
          did(r.action, r.status.removed, r.status.compressed, r.status.saved_bytes)),
        h("td", { class: "mono", "data-label": "last run" }, time(r.status.last_run),
          r.status.last_error ? h("div", { class: "error" }, r.status.last_error) : ""),
        h("td", {},
          h("button", { class: "run-rule", type: "button", onclick: async () => {
            status.replaceChildren();
            try {
              const p = await api(rulesPath(bucket, r.name) + "/run", { method: "POST" });
              status.append(h("div", { class: "notice" },
                `${r.name}: ${did(r.action, p.removed, p.compressed, p.saved_bytes)}` + (p.caught_up ? "." : " (more to do: the background goes on).")));
              await refresh();
            } catch (e) { status.append(errorBox(e)); }
          } }, "Run now"),
          confirmButton({ class: "remove-rule" }, "Remove", async () => {
            status.replaceChildren();
            try {
              await api(rulesPath(bucket, r.name), { method: "DELETE" });
              await refresh();
            } catch (e) { status.append(errorBox(e)); }
          }))))))));
  }

  const form = h("form", { class: "grid", id: "lifecycle-form", onsubmit: async (ev) => {
    ev.preventDefault();
    status.replaceChildren();
    let rule;
    try {
      rule = { older_than: parseDuration(f.older_than.value, "older than"), mode: f.mode.value, action: f.action.value };
      if (!rule.older_than) throw new Error("older than: give the age past which records go, e.g. 30d");
      const every = parseDuration(f.interval.value, "interval");
      if (every) rule.interval = every;
      const entries = f.entries.value.split(",").map((e) => e.trim()).filter((e) => e);
      if (entries.length) rule.entries = entries;
      if (f.when.value.trim()) {
        try { rule.when = JSON.parse(f.when.value); } catch (e) { throw new Error(`when: not JSON (${e.message})`); }
      }
    } catch (e) {
      status.append(errorBox(e));
      return;
    }
    try {
      await api(rulesPath(bucket, f.name.value.trim()), { method: "PUT", json: rule });
      status.append(h("div", { class: "notice" }, "Saved."));
      await refresh();
    } catch (e) { status.append(errorBox(e)); }
  } },
    h("label", { for: "lc-name" }, "rule name"), f.name,
    h("label", { for: "lc-older-than" }, "older than"), f.older_than,
    h("label", { for: "lc-interval" }, "every"), f.interval,
    h("label", { for: "lc-entries" }, "entries"), f.entries,
    h("label", { for: "lc-when" }, "when"), f.when,
    h("label", { for: "lc-mode" }, "mode"), f.mode,
    h("label", { for: "lc-action" }, "action"), f.action,
    h("div", { class: "actions row" }, h("button", { class: "primary", type: "submit", id: "lc-save" }, "Save rule"), status));
  card.append(h("h2", {}, "Lifecycle rules"),
    h("p", { class: "muted" }, "Records older than a rule's age, in its entries, matching its condition, are removed in the background, or, with the action compress, stored zstd-compressed (read back identical). Saving a rule of an existing name replaces it; changing rules needs a token with full access."),
    body, form);
  await refresh();
  return card;
}
