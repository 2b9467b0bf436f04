// The console: hash routes, the token prompt, and one module per page. Each page's
// render(main, params, ctx) returns a cleanup function (timers, pending requests).
import { api, token, onUnauthorized, ApiError } from "./api.js";
import { h, errorBox } from "./util.js";
import * as overview from "./pages/overview.js";
import * as bucket from "./pages/bucket.js";
import * as entry from "./pages/entry.js";
import * as tokens from "./pages/tokens.js";
import * as replication from "./pages/replication.js";
import * as tier from "./pages/tier.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
let cleanup = null;
let me = null;

// A bucket name, or one segment of an entry name, as the server takes them: a link whose
// name holds `..` (`#/b/scratch/e/x/..%2F..%2Fprod/cam`) would show one bucket and act on
// another (the browser resolves `..` in the request's URL).
const NAME = /^[A-Za-z0-9_.-]+$/;
const validName = (s) => NAME.test(s) && s !== "." && s !== "..";

const invalid = (what) => ({ page: { render: (m) => { m.append(errorBox(`${what}: not a valid name (letters, digits, '.', '_' and '-'; an entry's parts separated by '/')`)); } }, name: "invalid", params: {} });

function route() {
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, "").split("/").filter((s) => s !== "").map(decodeURIComponent);
  } catch (_) { // (a malformed %-escape)
    return invalid("this link");
  }
  if (parts[0] === "b" && parts.length >= 4 && parts[2] === "e") {
    const name = parts.slice(3).join("/");
    if (!validName(parts[1]) || !name.split("/").every(validName)) return invalid(`${parts[1]} / ${name}`);
    return { page: entry, name: "entry", params: { bucket: parts[1], entry: name } };
  }
  if (parts[0] === "b" && parts.length >= 2) {
    if (!validName(parts[1])) return invalid(parts[1]);
    return { page: bucket, name: "bucket", params: { bucket: parts[1] } };
  }
  if (parts[0] === "tokens") return { page: tokens, name: "tokens", params: {} };
  if (parts[0] === "replication") return { page: replication, name: "replication", params: {} };
  if (parts[0] === "tier") return { page: tier, name: "tier", params: {} };
  return { page: overview, name: "overview", params: {} };
}

function drawNav(active) {
  nav.replaceChildren(
    h("a", { href: "#/", class: active === "overview" ? "active" : "" }, "Overview"),
    me && me.full_access ? h("a", { href: "#/replication", class: active === "replication" ? "active" : "" }, "Replication") : null,
    h("a", { href: "#/tier", class: active === "tier" ? "active" : "" }, "Tier"),
    me && me.full_access ? h("a", { href: "#/tokens", class: active === "tokens" ? "active" : "" }, "Tokens") : null,
  );
  who.replaceChildren();
  if (token.get()) {
    who.append(
      h("span", { id: "token-name" }, `token: ${me ? me.name : "?"}`),
      h("button", { id: "sign-out", onclick: signOut }, "Sign out"),
    );
  }
}

function signOut() {
  token.clear();
  me = null;
  start();
}

async function render() {
  if (cleanup) { try { cleanup(); } catch (_) { /* ignore */ } cleanup = null; }
  const r = route();
  drawNav(r.name);
  main.replaceChildren();
  try {
    cleanup = (await r.page.render(main, r.params, { me })) || null;
  } catch (e) {
    main.append(errorBox(e));
  }
}

function login(message) {
  if (cleanup) { try { cleanup(); } catch (_) { /* ignore */ } cleanup = null; }
  nav.replaceChildren();
  who.replaceChildren();
  const input = h("input", { id: "token-input", type: "password", autocomplete: "off", placeholder: "tsb_…", required: true });
  const form = h("form", { id: "login-form", class: "card login", onsubmit: async (ev) => {
    ev.preventDefault();
    token.set(input.value.trim());
    await start();
  } },
    h("h2", {}, "This server needs a token"),
    h("p", { class: "muted" }, "The token is kept in this tab only (sessionStorage) and sent with every API call."),
    message ? errorBox(message) : null,
    h("div", { class: "row" }, input, h("button", { class: "primary", type: "submit" }, "Sign in")),
  );
  main.replaceChildren(form);
  input.focus();
}

async function start() {
  try {
    me = await api("/api/v1/me");
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      const had = token.get();
      token.clear();
      login(had ? e : null);
      return;
    }
    main.replaceChildren(errorBox(e));
    return;
  }
  await render();
}

onUnauthorized.add(() => {
  if (me) { me = null; token.clear(); login(new Error("the token is no longer valid: sign in again")); }
});
window.addEventListener("hashchange", () => { if (me) render(); });
start();
