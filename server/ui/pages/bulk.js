// Bulk edits of an entry's records (the SDK's update_labels_where, update_labels_batch and
// remove_batch): the labels of every record of the window shown that matches a `when`
// condition (`PATCH .../query`), the labels of the records ticked in the list (`PATCH
// .../batch`), or the removal of those (`DELETE .../batch`). Each asks once more before
// it acts and shows how many records it changed.
import { api } from "../api.js";
import { h, count, time, errorBox, confirmButton } from "../util.js";

/** "key=value key2=" → {key: "value", key2: null} (an empty value removes the label). */
export function parseLabelEdits(text) {
  const out = {};
  for (const part of text.split(/[\s,]+/).filter(Boolean)) {
    const i = part.indexOf("=");
    if (i <= 0) throw new Error(`"${part}" is not key=value (key= removes the label)`);
    const v = part.slice(i + 1);
    out[part.slice(0, i)] = v === "" ? null : v;
  }
  if (!Object.keys(out).length) throw new Error("give the labels to change: key=value sets, key= removes");
  return out;
}

/**
 * The card. `path` is the entry's API path; `windowShown()` the {start, stop} of the list;
 * `picked()` the timestamps ticked in it; `changed()` is called after a change (reload).
 * Returns the card, with `update()` to call when the ticks change.
 */
export function bulkCard(path, { windowShown, picked, changed }) {
  const labelsInput = h("input", { id: "bulk-labels", class: "grow", placeholder: "labels: key=value sets, key= removes" });
  const whenInput = h("textarea", { id: "bulk-when", rows: 2, placeholder: "when condition (JSON, optional), e.g. {\"&score\": {\"$gt\": 10}}" });
  const scope = h("p", { class: "muted", id: "bulk-scope" });
  const status = h("div", { id: "bulk-status" });
  const pickedLine = h("span", { class: "muted", id: "bulk-picked" });

  function edits() {
    try {
      return parseLabelEdits(labelsInput.value);
    } catch (e) {
      status.replaceChildren(h("p", { class: "error" }, e.message));
      return null;
    }
  }

  function condition() {
    const text = whenInput.value.trim();
    if (!text) return { ok: true, when: undefined };
    try {
      return { ok: true, when: JSON.parse(text) };
    } catch (e) {
      status.replaceChildren(h("p", { class: "error" }, `The when condition is not JSON: ${e.message}`));
      return { ok: false };
    }
  }

  const say = (text) => status.replaceChildren(h("p", { class: "notice", id: "bulk-result" }, text));

  /** A batch answer ({done, failed, results}) as one line. */
  function batchLine(verb, r) {
    const first = (r.results || []).find((x) => x.status !== 200);
    const why = first && first.error ? ` (first: ${first.ts}: ${first.status} ${first.error.code}: ${first.error.message})` : "";
    return `${verb} ${count(r.done)} record(s)` + (r.failed ? `, ${count(r.failed)} failed${why}.` : ".");
  }

  const updateWhere = confirmButton({ id: "bulk-update-where" }, "Update labels of the window", async () => {
    status.replaceChildren();
    const labels = edits();
    const c = condition();
    if (!labels || !c.ok) return;
    const { start, stop } = windowShown();
    try {
      const r = await api(`${path}/query`, { method: "PATCH", json: { start, stop, when: c.when, labels } });
      say(`Updated ${count(r.updated)} record(s) of ${time(start)} → ${time(stop)}.`);
      changed();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });

  const updatePicked = confirmButton({ id: "bulk-update-picked" }, "Update labels of the ticked", async () => {
    status.replaceChildren();
    const labels = edits();
    const ts = picked();
    if (!labels) return;
    if (!ts.length) { status.replaceChildren(h("p", { class: "error" }, "Tick records in the list first.")); return; }
    try {
      const r = await api(`${path}/batch`, { method: "PATCH", json: { records: ts.map((t) => ({ ts: t, labels })) } });
      say(batchLine("Updated", r));
      changed();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });

  const removePicked = confirmButton({ id: "bulk-remove-picked" }, "Delete the ticked", async () => {
    status.replaceChildren();
    const ts = picked();
    if (!ts.length) { status.replaceChildren(h("p", { class: "error" }, "Tick records in the list first.")); return; }
    try {
      const r = await api(`${path}/batch`, { method: "DELETE", json: { ts } });
      say(batchLine("Removed", r));
      changed();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });
  // The two label updates are no removal: shown as plain buttons, still asking twice.
  updateWhere.classList.remove("danger");
  updatePicked.classList.remove("danger");

  function update() {
    const n = picked().length;
    pickedLine.textContent = n ? `${count(n)} record(s) ticked` : "no record ticked";
    const { start, stop } = windowShown();
    scope.textContent = `The window shown: ${time(start)} → ${time(stop)} (UTC); its label filters do not apply, the condition below does.`;
  }

  const card = h("div", { class: "card", id: "bulk-card" },
    h("h2", {}, "Bulk edit"),
    h("p", { class: "muted" }, "Change the labels of many records at once, or delete the ticked ones. Each button asks once more."),
    h("div", { class: "row" }, labelsInput),
    scope, whenInput,
    h("div", { class: "row" }, updateWhere),
    h("div", { class: "row" }, pickedLine, updatePicked, removePicked),
    status);
  card.update = update;
  update();
  return card;
}
