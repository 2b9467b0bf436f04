// Tokens (full access only; the API refuses anyone else): list, create, revoke.
import { api } from "../api.js";
import { h, time, errorBox } from "../util.js";

export async function render(main) {
  main.append(h("h1", {}, "Tokens"));
  const listCard = h("div", { class: "card" });
  const created = h("div", { id: "token-created" });
  const patterns = (s) => s.split(/[\s,]+/).filter(Boolean);
  const name = h("input", { id: "new-token-name", required: true, placeholder: "cam-reader" });
  const full = h("input", { id: "new-token-full", type: "checkbox" });
  const read = h("input", { id: "new-token-read", placeholder: "cams, cam-*" });
  const write = h("input", { id: "new-token-write", placeholder: "cams" });
  const form = h("form", { class: "grid", id: "token-form", onsubmit: async (ev) => {
    ev.preventDefault();
    created.replaceChildren();
    try {
      const t = await api(`/api/v1/tokens/${encodeURIComponent(name.value.trim())}`, {
        method: "POST",
        json: { full_access: full.checked, read: patterns(read.value), write: patterns(write.value) },
      });
      created.append(h("div", { class: "notice" }, `Token ${t.name} created. Its value is shown once: `,
        h("code", { id: "token-value" }, t.value)));
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

  async function refresh() {
    const status = h("div", { id: "tokens-status" });
    try {
      const { tokens } = await api("/api/v1/tokens");
      listCard.replaceChildren(h("h2", {}, "Stored tokens"), status,
        tokens.length === 0 ? h("p", { class: "muted" }, "No stored token (a --token admin token is never listed).") :
          h("div", { class: "scroll" }, h("table", { id: "tokens" },
            h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "full access"), h("th", {}, "read"),
              h("th", {}, "write"), h("th", {}, "created"), h("th", {}, ""))),
            h("tbody", {}, tokens.map((t) => {
              const b = h("button", { class: "danger", "data-token": t.name });
              b.textContent = "Revoke";
              b.addEventListener("click", () => revoke(t, b, status));
              return h("tr", {}, h("td", {}, t.name), h("td", {}, t.full_access ? "yes" : "no"),
                h("td", { class: "mono" }, t.read.join(", ")), h("td", { class: "mono" }, t.write.join(", ")),
                h("td", { class: "mono" }, time(t.created)), h("td", {}, b));
            })))));
    } catch (e) {
      listCard.replaceChildren(h("h2", {}, "Stored tokens"), errorBox(e));
    }
  }

  main.append(listCard, h("div", { class: "card" }, h("h2", {}, "New token"),
    h("p", { class: "muted" }, "Bucket patterns may end in * (cam-*); * alone is every bucket. Write implies read."),
    form, created));
  await refresh();
}
