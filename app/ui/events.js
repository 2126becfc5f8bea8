// Renders a run's event log: streamed text as text, tool calls folded with their results, each
// attempt in its own section, and the run's own lifecycle as marker lines between them.

import { h, json } from "./dom.js";

const TOOL_ARGS_PREVIEW = 80;
const RENDERERS = {
  "run.queued": "queued",
  "run.started": "started",
  "message.delta": "delta",
  "message.completed": "completed",
  "tool.call": "toolCall",
  "tool.result": "toolResult",
  "run.retrying": "retrying",
  "run.cancel_requested": "cancelRequested",
  "run.waiting": "waiting",
  "run.resumed": "resumed",
  "run.completed": "runCompleted",
  "run.failed": "runFailed",
  "run.cancelled": "runCancelled",
};

function preview(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > TOOL_ARGS_PREVIEW ? `${text.slice(0, TOOL_ARGS_PREVIEW)}…` : text;
}

function block(value) {
  return typeof value === "string" ? h("pre", { class: "output" }, value) : json(value);
}

export class EventLog {
  constructor() {
    this.el = h("ol", { class: "event-log", "aria-label": "Run events", "aria-live": "polite" });
    this.executions = 0;
    this.attempt = null; // the open attempt's <ol>, until its run ends or is retried
    this.message = null; // the <p> that message.delta text is appended to
    this.tools = new Map();
  }

  add({ seq, type, data }) {
    this.el.dataset.lastSeq = String(seq);
    this[RENDERERS[type] ?? "unknown"](seq, data, type);
  }

  // Lines go into the open attempt, or between attempts when none is open.
  #append(node) {
    // Follow the tail like a terminal, but only while the reader is at the bottom of the page.
    const following = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
    (this.attempt ?? this.el).append(node);
    if (following) node.scrollIntoView({ block: "nearest" });
    return node;
  }

  #marker(seq, kind, label, ...detail) {
    return this.#append(
      h("li", { class: `marker marker-${kind}`, dataset: { seq } }, h("strong", {}, label), ...detail),
    );
  }

  #closeAttempt() {
    this.attempt = null;
    this.message = null;
  }

  queued(seq) {
    this.#closeAttempt();
    this.executions += 1;
    this.#marker(seq, "queued", this.executions === 1 ? "Queued" : `Requeued — execution ${this.executions}`);
  }

  started(seq, data) {
    this.#closeAttempt();
    this.tools = new Map(); // tool call ids are per attempt (a retry may reuse them)
    const list = h("ol", { class: "attempt-events" });
    const label = `Attempt ${data.attempt}`;
    this.el.append(
      h(
        "li",
        { class: "attempt", dataset: { seq, attempt: data.attempt } },
        h("h3", { class: "attempt-title" }, label, this.executions > 1 ? h("span", { class: "muted" }, ` · execution ${this.executions}`) : null),
        list,
      ),
    );
    this.attempt = list;
  }

  delta(seq, data) {
    if (!this.message) {
      this.message = h("p", { class: "message-text" });
      this.#append(h("li", { class: "message", dataset: { seq } }, this.message));
    }
    this.message.append(data.text ?? "");
  }

  completed(seq, data) {
    if (!this.message) this.delta(seq, data);
    this.message.parentElement.classList.add("done");
    this.message = null;
  }

  toolCall(seq, data) {
    this.message = null;
    const state = h("span", { class: "tool-state running" }, "running");
    const details = h(
      "details",
      { class: "tool" },
      h(
        "summary",
        {},
        h("span", { class: "tool-name" }, data.name ?? "tool"),
        h("code", { class: "tool-args" }, preview(data.arguments ?? {})),
        state,
      ),
      h("div", { class: "tool-body" }, h("h4", {}, "Arguments"), block(data.arguments ?? {})),
    );
    this.tools.set(data.tool_call_id, { details, state });
    this.#append(h("li", { class: "tool-item", dataset: { seq } }, details));
  }

  toolResult(seq, data) {
    let tool = this.tools.get(data.tool_call_id);
    if (!tool) {
      this.toolCall(seq, { tool_call_id: data.tool_call_id, name: data.name, arguments: {} });
      tool = this.tools.get(data.tool_call_id);
    }
    const { output, is_error: isError, tool_call_id: _id, name: _name, ...extra } = data;
    tool.state.className = `tool-state ${isError ? "error" : "ok"}`;
    tool.state.textContent = isError ? "error" : "done";
    tool.details.classList.toggle("is-error", Boolean(isError));
    const body = tool.details.querySelector(".tool-body");
    body.append(h("h4", {}, "Result"), block(output ?? ""));
    const fields = Object.entries(extra).map(([key, value]) => h("code", {}, `${key}: ${JSON.stringify(value)}`));
    if (fields.length) body.append(h("p", { class: "tool-extra" }, fields));
  }

  retrying(seq, data) {
    const when = data.available_at ? ` · next try ${new Date(data.available_at).toLocaleTimeString()}` : "";
    this.#marker(seq, "retrying", "Attempt failed, retrying", h("code", {}, data.error_code ?? ""), when);
    this.#closeAttempt();
  }

  cancelRequested(seq, data) {
    this.#marker(seq, "cancel-requested", "Stop requested", ` (${data.reason ?? "user"})`, data.note ? ` — ${data.note}` : "");
  }

  // A wait ends the attempt: the resumed run starts a new one.
  waiting(seq, data) {
    this.#marker(seq, "waiting", data.name === "approval" ? "Waiting for approval" : `Waiting for ${data.name}`);
    this.#closeAttempt();
  }

  resumed(seq, data) {
    const detail = data.timed_out ? " (timed out)" : h("code", {}, ` ${preview(data.value)}`);
    this.#marker(seq, "resumed", "Resumed", detail);
  }

  runCompleted(seq, data) {
    const output = h("details", { class: "output-details" }, h("summary", {}, "Output"), block(data.output ?? null));
    this.#marker(seq, "completed", "Completed", output);
    this.#closeAttempt();
  }

  runFailed(seq, data) {
    this.#marker(seq, "failed", "Failed", h("code", {}, data.error_code ?? ""), data.error_message ? ` ${data.error_message}` : "");
    this.#closeAttempt();
  }

  runCancelled(seq, data) {
    this.#marker(seq, "cancelled", "Cancelled", ` (${data.reason ?? "user"})`);
    this.#closeAttempt();
  }

  unknown(seq, data, type) {
    this.#marker(seq, "other", type, json(data));
  }
}
