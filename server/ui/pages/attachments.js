// The attachments of an entry (small JSON documents kept with it under a name): a card of
// the entry page listing them, with a form to add or replace one and a two-step delete.
import { api } from "../api.js";
import { h, time, errorBox } from "../util.js";

/** The card; `path` is the entry's API path. Loads itself. */
export function attachmentsCard(path) {
  const list = h("div", { id: "attachments" });
  const status = h("div", { id: "attachment-status" });
  const nameInput = h("input", { id: "attachment-name", placeholder: "name, e.g. schema" });
  const docInput = h("textarea", { id: "attachment-doc", rows: 3, class: "grow", placeholder: "JSON document, e.g. {\"fps\": 30}" });
  const form = h("form", { id: "attachment-form", onsubmit: (ev) => { ev.preventDefault(); save(); } },
    h("div", { class: "row" }, nameInput, h("button", { type: "submit", class: "primary", id: "attachment-save" }, "Save attachment")),
    docInput);
  const card = h("div", { class: "card", id: "attachments-card" },
    h("h2", {}, "Attachments"),
    h("p", { class: "muted" }, "JSON documents kept with the entry under a name (a schema, a calibration); not records."),
    list, status, form);

  async function load() {
    try {
      const docs = await api(`${path}/attachments`);
      const names = Object.keys(docs).sort();
      if (!names.length) {
        list.replaceChildren(h("p", { class: "muted" }, "No attachment."));
        return;
      }
      list.replaceChildren(...names.map((n) => item(n, docs[n])));
    } catch (e) {
      list.replaceChildren(errorBox(e));
    }
  }

  function item(name, doc) {
    const del = h("button", { class: "danger", "data-name": name, onclick: () => remove(name, del) }, "Delete");
    const edit = h("button", { "data-name": name, onclick: () => {
      nameInput.value = name;
      docInput.value = JSON.stringify(doc, null, 2);
      docInput.focus();
    } }, "Edit");
    return h("div", { class: "attachment", "data-name": name },
      h("div", { class: "row" }, h("strong", { class: "mono" }, name), edit, del),
      h("pre", {}, JSON.stringify(doc, null, 2)));
  }

  async function save() {
    status.replaceChildren();
    const name = nameInput.value.trim();
    let doc;
    try {
      doc = JSON.parse(docInput.value);
    } catch (e) {
      status.append(h("p", { class: "error" }, `Not JSON: ${e.message}`));
      return;
    }
    try {
      const r = await api(`${path}/attachments/${encodeURIComponent(name)}`, { method: "PUT", json: doc });
      const ts = r && r.written ? r.written[name] : undefined;
      status.append(h("p", { class: "notice" }, `Saved ${name}${ts ? ` at ${time(ts)}` : ""}.`));
      docInput.value = "";
      await load();
    } catch (e) {
      status.append(errorBox(e));
    }
  }

  async function remove(name, button) {
    if (!button.classList.contains("armed")) {
      button.classList.add("armed");
      button.textContent = "Confirm delete";
      return;
    }
    status.replaceChildren();
    try {
      await api(`${path}/attachments/${encodeURIComponent(name)}`, { method: "DELETE" });
      status.append(h("p", { class: "notice" }, `Removed ${name}.`));
      await load();
    } catch (e) {
      status.append(errorBox(e));
    }
  }

  load();
  return card;
}
