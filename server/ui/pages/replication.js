// Replication: every task (source → destination, phase, lag, pending, sent, errors and the
// last error), pause/resume/disable/remove (remove asks once more) and a form that creates a
// task (entries with `!` exclusions, a destination prefix, the destination's API,
// compression and the mode).
// Refreshed every 2 s. The routes need full access when tokens are on: their 403 is shown.
import { api } from "../api.js";
import { h, bytes, count, time, errorBox, confirmButton } from "../util.js";

const path = (name) => `/api/v1/replications/${encodeURIComponent(name)}`;

/** The settings a PUT takes back from a task's answer (the token and CA are kept when absent). */
function spec(s, mode) {
  const out = { src_bucket: s.src_bucket, dst_url: s.dst_url, dst_bucket: s.dst_bucket, entries: s.entries, mode };
  // Kept as they are (a pause once dropped them: the task lost its prefix).
  for (const k of ["dst_prefix", "dst_api", "compression"]) if (s[k] !== undefined && s[k] !== null) out[k] = s[k];
  if (s.when !== undefined && s.when !== null) out.when = s.when;
  if (s.from !== undefined && s.from !== null) out.from = s.from;
  return out;
}

function lag(st) {
  if (st.oldest_pending_age_s === null || st.oldest_pending_age_s === undefined) return "–";
  const s = st.oldest_pending_age_s;
  return s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(0)} min` : `${(s / 3600).toFixed(1)} h`;
}

export async function render(main) {
  main.append(h("h1", {}, "Replication"));
  const list = h("div", { class: "card", id: "replication-list" });
  const status = h("div", { id: "replication-status" });
  main.append(list, status, createForm(() => refresh()));
  let stopped = false;
  let timer = null;

  async function act(fn) {
    status.replaceChildren();
    try { await fn(); await refresh(); } catch (e) { status.append(errorBox(e)); }
  }

  async function refresh() {
    let tasks;
    try {
      tasks = (await api("/api/v1/replications")).replications;
    } catch (e) {
      if (!stopped) list.replaceChildren(h("h2", {}, "Tasks"), errorBox(e));
      return;
    }
    if (stopped) return;
    list.replaceChildren(h("h2", {}, "Tasks"));
    if (!tasks.length) { list.append(h("p", { class: "muted" }, "No replication task yet: create one below.")); return; }
    list.append(h("div", { class: "scroll" }, h("table", { id: "replications", class: "stack" },
      h("thead", {}, h("tr", {}, ...["task", "source → destination", "status", "lag", "pending", "sent", "errors", "last error", ""]
        .map((t) => h("th", { class: ["lag", "pending", "sent", "errors"].includes(t) ? "num" : "" }, t)))),
      h("tbody", {}, tasks.map((t) => {
        const st = t.status;
        const paused = t.settings.mode !== "enabled";
        const prefix = t.settings.dst_prefix ? ` as ${t.settings.dst_prefix}/…` : "";
        const extra = [t.settings.dst_api === "reductstore" ? "ReductStore API" : "",
          t.settings.compression && t.settings.compression !== "auto" ? `compression ${t.settings.compression}` : ""]
          .filter((x) => x).join(", ");
        return h("tr", { "data-task": t.name },
          h("td", { "data-label": "task" }, t.name),
          h("td", { "data-label": "source → destination", class: "wrap" },
            `${t.settings.src_bucket}${t.settings.entries.length ? ` (${t.settings.entries.join(", ")})` : ""} → ${t.settings.dst_url} ${t.settings.dst_bucket}${prefix}${extra ? ` [${extra}]` : ""}`),
          h("td", { "data-label": "status", class: `phase ${st.phase}` }, st.phase),
          h("td", { "data-label": "lag", class: "num lag" }, lag(st)),
          h("td", { "data-label": "pending", class: "num" },
            `${count(st.pending_records)}${st.pending_is_lower_bound ? "+" : ""} (${bytes(st.pending_bytes)})`),
          h("td", { "data-label": "sent", class: "num" }, `${count(st.sent_records)} (${bytes(st.sent_bytes)})`),
          h("td", { "data-label": "errors", class: "num" }, count(st.errors)),
          h("td", { "data-label": "last error", class: "wrap last-error" },
            st.last_error ? `${time(st.last_error.at)}: ${st.last_error.message}` : "–"),
          h("td", {}, h("div", { class: "row" },
            h("button", { class: paused ? "resume" : "pause", type: "button",
              onclick: () => act(() => api(path(t.name), { method: "PUT", json: spec(t.settings, paused ? "enabled" : "paused") })) },
            paused ? "Resume" : "Pause"),
            t.settings.mode === "disabled" ? null : h("button", { class: "disable", type: "button",
              title: "stop sending and keep nothing: records written while disabled are never sent",
              onclick: () => act(() => api(path(t.name), { method: "PUT", json: spec(t.settings, "disabled") })) },
            "Disable"),
            confirmButton({ class: "remove-task" }, "Remove", () => act(() => api(path(t.name), { method: "DELETE" }))))));
      })))));
  }

  async function loop() {
    await refresh();
    if (!stopped) timer = setTimeout(loop, 2000);
  }
  await loop();
  return () => { stopped = true; clearTimeout(timer); };
}

function createForm(done) {
  const f = {
    name: h("input", { id: "task-name", placeholder: "to-cloud", required: true }),
    src: h("input", { id: "task-src", placeholder: "cams", required: true }),
    url: h("input", { id: "task-dst-url", placeholder: "https://cloud.example:8686", required: true }),
    dst: h("input", { id: "task-dst-bucket", placeholder: "edge-1", required: true }),
    token: h("input", { id: "task-dst-token", type: "password", autocomplete: "off", placeholder: "tsb_… (optional)" }),
    entries: h("input", { id: "task-entries", placeholder: "all; or front/*, imu, !front/debug" }),
    prefix: h("input", { id: "task-dst-prefix", placeholder: "optional, e.g. robot-1" }),
    api: h("select", { id: "task-dst-api" }, h("option", { value: "tsblob" }, "tsblob"),
      h("option", { value: "reductstore" }, "ReductStore")),
    compression: h("select", { id: "task-compression" }, ...["auto", "zstd", "none", "gzip"].map((v) => h("option", { value: v }, v))),
    mode: h("select", { id: "task-mode" }, ...["enabled", "paused", "disabled"].map((v) => h("option", { value: v }, v))),
    when: h("input", { id: "task-when", placeholder: "optional condition, e.g. {\"&alarm\": {\"$eq\": \"1\"}}" }),
  };
  const status = h("div", { id: "task-status" });
  return h("div", { class: "card" }, h("h2", {}, "New task"),
    h("form", { class: "grid", id: "task-form", onsubmit: async (ev) => {
      ev.preventDefault();
      status.replaceChildren();
      try {
        const body = {
          src_bucket: f.src.value.trim(), dst_url: f.url.value.trim(), dst_bucket: f.dst.value.trim(),
          entries: f.entries.value.split(/[\s,]+/).filter((s) => s),
          dst_api: f.api.value, compression: f.compression.value, mode: f.mode.value,
        };
        if (f.prefix.value.trim()) body.dst_prefix = f.prefix.value.trim();
        if (f.token.value.trim()) body.dst_token = f.token.value.trim();
        if (f.when.value.trim()) {
          try { body.when = JSON.parse(f.when.value); } catch (e) { throw new Error(`the condition is not JSON: ${e.message}`); }
        }
        await api(path(f.name.value.trim()), { method: "PUT", json: body });
        status.append(h("div", { class: "notice" }, `Task ${f.name.value.trim()} saved.`));
        await done();
      } catch (e) { status.append(errorBox(e)); }
    } },
      h("label", { for: "task-name" }, "name"), f.name,
      h("label", { for: "task-src" }, "source bucket"), f.src,
      h("label", { for: "task-dst-url" }, "destination URL"), f.url,
      h("label", { for: "task-dst-bucket" }, "destination bucket"), f.dst,
      h("label", { for: "task-dst-token" }, "destination token"), f.token,
      h("label", { for: "task-entries" }, "entries"), f.entries,
      h("label", { for: "task-when" }, "when"), f.when,
      h("label", { for: "task-dst-prefix" }, "destination prefix"), f.prefix,
      h("label", { for: "task-dst-api" }, "destination API"), f.api,
      h("label", { for: "task-compression" }, "compression"), f.compression,
      h("label", { for: "task-mode" }, "mode"), f.mode,
      h("div", { class: "actions row" }, h("button", { class: "primary", type: "submit", id: "task-create" }, "Save task"), status)));
}
