// Tokens (full access only; the API refuses anyone else): list, create (with an expiry, an
// inactivity ttl and an IP allow-list), rotate, revoke.
import { api } from "../api.js";
import { h, time, errorBox, parseDuration, durationText, confirmButton } from "../util.js";

/** "30d" (from now), or an ISO time ("2026-12-31T00:00:00Z") → µs; "" → undefined. */
function parseExpiry(text) {
  const t = String(text).trim();
  if (t === "") return undefined;
  if (/^\d+(\.\d+)?\s*[a-zµ]+$/i.test(t)) return Date.now() * 1000 + parseDuration(t, "expires");
  const ms = Date.parse(t);
  if (Number.isNaN(ms)) throw new Error(`expires: "${text}" is neither a duration from now ("30d") nor a time ("2026-12-31T00:00:00Z")`);
  return ms * 1000;
}

/** "12h", "90s" → whole seconds; "" → undefined. */
function parseTtl(text) {
  const us = parseDuration(text, "ttl");
  if (us === undefined || us === null) return undefined;
  if (us < 1e6 || us % 1e6 !== 0) throw new Error(`ttl: "${text}" must be whole seconds, at least 1s (e.g. "12h")`);
  return us / 1e6;
}

export async function render(main) {
  main.append(h("h1", {}, "Tokens"));
  const listCard = h("div", { class: "card" });
  const created = h("div", { id: "token-created" });
  const patterns = (s) => s.split(/[\s,]+/).filter(Boolean);
  const name = h("input", { id: "new-token-name", required: true, placeholder: "cam-reader" });
  const full = h("input", { id: "new-token-full", type: "checkbox" });
  const read = h("input", { id: "new-token-read", placeholder: "cams, cam-*" });
  const write = h("input", { id: "new-token-write", placeholder: "cams" });
  const expires = h("input", { id: "new-token-expires", placeholder: "30d, or 2026-12-31T00:00:00Z (empty: never)" });
  const ttl = h("input", { id: "new-token-ttl", placeholder: "12h (empty: no limit)" });
  const ips = h("input", { id: "new-token-ips", placeholder: "10.0.0.0/8, 203.0.113.7 (empty: any)" });
  const shown = (verb, t) => h("div", { class: "notice" }, `Token ${t.name} ${verb}. Its value is shown once: `,
    h("code", { id: "token-value" }, t.value));
  const form = h("form", { class: "grid", id: "token-form", onsubmit: async (ev) => {
    ev.preventDefault();
    created.replaceChildren();
    try {
      const spec = { full_access: full.checked, read: patterns(read.value), write: patterns(write.value) };
      const at = parseExpiry(expires.value);
      if (at !== undefined) spec.expires_at = at;
      const secs = parseTtl(ttl.value);
      if (secs !== undefined) spec.ttl = secs;
      const nets = patterns(ips.value);
      if (nets.length) spec.ip_allowlist = nets;
      const t = await api(`/api/v1/tokens/${encodeURIComponent(name.value.trim())}`, { method: "POST", json: spec });
      created.append(shown("created", t));
      form.reset();
      await refresh();
    } catch (e) {
      created.append(errorBox(e));
    }
  } },
    h("label", { for: "new-token-name" }, "name"), name,
    h("label", { for: "new-token-full" }, "full access"), h("span", {}, full),
    h("label", { for: "new-token-read" }, "read buckets"), read,
    h("label", { for: "new-token-write" }, "write buckets"), write,
    h("label", { for: "new-token-expires" }, "expires"), expires,
    h("label", { for: "new-token-ttl" }, "unused for (ttl)"), ttl,
    h("label", { for: "new-token-ips" }, "IP allow-list"), ips,
    h("div", { class: "actions row" }, h("button", { class: "primary", type: "submit" }, "Create token")));

  async function revoke(t, button, status) {
    if (!button.classList.contains("armed")) {
      button.classList.add("armed");
      button.textContent = "Confirm revoke";
      return;
    }
    status.replaceChildren();
    try {
      await api(`/api/v1/tokens/${encodeURIComponent(t.name)}`, { method: "DELETE" });
      await refresh();
    } catch (e) {
      button.classList.remove("armed");
      button.textContent = "Revoke";
      status.append(errorBox(e));
    }
  }

  function limits(t) {
    const parts = [];
    if (t.is_expired) parts.push(h("strong", { class: "expired" }, "expired"));
    if (t.expires_at) parts.push(`until ${time(t.expires_at)}`);
    if (t.ttl) parts.push(`ttl ${durationText(t.ttl * 1e6)}`);
    if (t.ip_allowlist && t.ip_allowlist.length) parts.push(`from ${t.ip_allowlist.join(", ")}`);
    return parts.length ? parts.flatMap((p, i) => (i ? [" · ", p] : [p])) : ["–"];
  }

  async function refresh() {
    const status = h("div", { id: "tokens-status" });
    try {
      const { tokens } = await api("/api/v1/tokens");
      listCard.replaceChildren(h("h2", {}, "Stored tokens"), status,
        tokens.length === 0 ? h("p", { class: "muted" }, "No stored token (a --token admin token is never listed).") :
          h("div", { class: "scroll" }, h("table", { id: "tokens" },
            h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "full access"), h("th", {}, "read"),
              h("th", {}, "write"), h("th", {}, "limits"), h("th", {}, "created"), h("th", {}, "last used"),
              h("th", {}, ""))),
            h("tbody", {}, tokens.map((t) => {
              const b = h("button", { class: "danger", "data-token": t.name });
              b.textContent = "Revoke";
              b.addEventListener("click", () => revoke(t, b, status));
              const rotate = confirmButton({ "data-rotate": t.name }, "Rotate", async () => {
                status.replaceChildren();
                created.replaceChildren();
                try {
                  const r = await api(`/api/v1/tokens/${encodeURIComponent(t.name)}/rotate`, { method: "POST" });
                  created.append(shown("rotated (the old value no longer works)", r));
                  await refresh();
                } catch (e) {
                  status.append(errorBox(e));
                }
              });
              return h("tr", { "data-name": t.name }, h("td", {}, t.name), h("td", {}, t.full_access ? "yes" : "no"),
                h("td", { class: "mono" }, t.read.join(", ")), h("td", { class: "mono" }, t.write.join(", ")),
                h("td", { class: "mono limits" }, ...limits(t)),
                h("td", { class: "mono" }, time(t.rotated || t.created)),
                h("td", { class: "mono" }, time(t.last_access)), h("td", { class: "row" }, rotate, b));
            })))));
    } catch (e) {
      listCard.replaceChildren(h("h2", {}, "Stored tokens"), errorBox(e));
    }
  }

  main.append(listCard, h("div", { class: "card" }, h("h2", {}, "New token"),
    h("p", { class: "muted" }, "Bucket patterns may end in * (cam-*); * alone is every bucket. Write implies read. " +
      "A token stops working at its expiry, or once unused for its ttl; from an address outside its allow-list it is refused. " +
      "Rotating gives a token a new value: the old one stops working at once, streams opened with it end."),
    form, created));
  await refresh();
}
