// The open wait of a waiting run (docs/waits.md): what it waits for, and the answer. An
// "approval" (the openai agent's gate before a tool call) gets Approve and Deny with an
// optional note; any other wait a JSON value. The answer goes through /client.js's resumeRun
// with a token that has the "resume" scope, so an admin answers another tenant's run the same way.

import { resumeRun } from "../client.js";
import { duration, h, json, notice, replace } from "../dom.js";

export function waitpointPanel(api, runId, { onResumed }) {
  const el = h("section", { class: "card waitpoint", "aria-labelledby": "waitpoint-title" });
  let shownId = null;

  async function answer(value, waitpointId, message) {
    replace(message);
    el.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    try {
      await resumeRun(runId, value, { waitpointId, getToken: (id, scopes) => api.streamToken(id, scopes) });
      replace(message, notice("Answered: the run goes on.", "ok"));
      await onResumed();
    } catch (e) {
      replace(message, notice(`Could not resume: ${e.message}`));
      el.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    }
  }

  function approval(point, message) {
    const note = h("input", { name: "note", placeholder: "Note for the model (optional)", maxlength: "2000" });
    return h(
      "div",
      { class: "fields" },
      h("label", { class: "field grow" }, h("span", {}, "Note"), note),
      h("button", { type: "button", class: "button primary", onclick: () => answer({ approved: true }, point.waitpoint_id, message) }, "Approve"),
      h("button", {
        type: "button",
        class: "button danger",
        onclick: () => answer(note.value ? { approved: false, note: note.value } : { approved: false }, point.waitpoint_id, message),
      }, "Deny"),
    );
  }

  function value(point, message) {
    const box = h("textarea", { name: "value", rows: "3", spellcheck: "false", "aria-label": "Value (JSON)" }, "true");
    const send = () => {
      let parsed;
      try {
        parsed = JSON.parse(box.value);
      } catch (e) {
        replace(message, notice(`The value is not JSON: ${e.message}`));
        return;
      }
      answer(parsed, point.waitpoint_id, message);
    };
    return h(
      "div",
      { class: "fields" },
      h("label", { class: "field grow" }, h("span", {}, "Value (JSON)"), box),
      h("button", { type: "button", class: "button primary", onclick: send }, "Resume"),
    );
  }

  // Redrawn only when another wait opens: a refresh must not wipe a note being typed.
  function show(run) {
    const point = run.status === "waiting" ? run.waitpoint : null;
    if ((point?.waitpoint_id ?? null) === shownId) return;
    shownId = point?.waitpoint_id ?? null;
    if (!point) {
      replace(el);
      el.hidden = true;
      return;
    }
    const message = h("div");
    el.hidden = false;
    replace(
      el,
      h("h2", { id: "waitpoint-title" }, point.name === "approval" ? "Waiting for approval" : `Waiting for input: ${point.name}`),
      point.expires_at
        ? h("p", { class: "muted" }, h("time", { datetime: point.expires_at, title: new Date(point.expires_at).toLocaleString() },
            `Times out in ${duration((Date.parse(point.expires_at) - Date.now()) / 1000)}`))
        : null,
      h("details", { class: "payload", open: true }, h("summary", {}, "Payload"), json(point.payload)),
      point.name === "approval" ? approval(point, message) : value(point, message),
      message,
    );
  }

  el.hidden = true;
  return { el, show };
}
