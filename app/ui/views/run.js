// One run: its facts, Stop and (for admins) Requeue, the answer to its wait, and its live event stream.

import { ApiError } from "../api.js";
import { ago, h, json, notice, replace, shortId, statusBadge } from "../dom.js";
import { EventLog } from "../events.js";
import { followRun } from "../client.js";
import { deliveriesPanel } from "./deliveries.js";
import { autoRefresh } from "./refresh.js";
import { waitpointPanel } from "./waitpoint.js";

const REFRESH_MS = 2000;
const TERMINAL = new Set(["done", "dead", "cancelled"]);
const STREAM_STATES = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  ended: "Ended",
  error: "Unavailable",
};

function fact(label, value) {
  return value === null || value === undefined || value === "" ? null : [h("dt", {}, label), h("dd", {}, value)];
}

// "1,200 tokens (1,000 in, 200 out) of 5,000 · 3 model calls · 2 tool calls"; null before any
function usageText(usage, budget) {
  if (!usage || !(usage.model_calls || usage.tool_calls || usage.input_tokens || usage.output_tokens)) return null;
  const n = (x) => x.toLocaleString("en-US");
  const tokens = usage.input_tokens + usage.output_tokens;
  const cap = budget?.max_tokens ? ` of ${n(budget.max_tokens)}` : "";
  return `${n(tokens)} tokens (${n(usage.input_tokens)} in, ${n(usage.output_tokens)} out)${cap}`
    + ` · ${n(usage.model_calls)} model calls · ${n(usage.tool_calls)} tool calls`;
}

export function mountRun(view, { api, route }) {
  const id = route.id;
  let run = null;
  let streamError = null;

  const title = h("h1", {}, "Run");
  const badge = h("span");
  const actions = h("div", { class: "actions" });
  const message = h("div");
  const facts = h("dl", { class: "facts" });
  const payloads = h("div", { class: "payloads" });
  const streamState = h("span", { class: "stream-state", role: "status" });
  const streamNote = h("div");
  const log = new EventLog();
  const deliveries = deliveriesPanel(api, id);
  const waitpoint = waitpointPanel(api, id, { onResumed: () => refresh.now() });
  let stream = null; // the follower of the run's events (client.js), while one is running
  let lastSeq = 0;

  function follow() {
    stream = followRun(id, {
      after: lastSeq, // a requeued run streams again from where the log stopped
      getToken: () => api.streamToken(id),
      onEvent(event) {
        lastSeq = event.seq;
        log.add(event);
        if (event.type.startsWith("run.")) refresh.now();
      },
      onState(state, detail) {
        streamState.dataset.state = state;
        streamState.textContent = STREAM_STATES[state];
        if (state === "error") {
          streamError = detail;
          replace(streamNote, notice(`Event stream unavailable: ${detail}`, "info"));
        }
      },
    });
  }

  async function act(label, action) {
    replace(message);
    try {
      await action();
      replace(message, notice(label, "ok"));
    } catch (e) {
      replace(message, notice(e.message));
    }
    await refresh.now();
  }

  function renderActions() {
    const finished = TERMINAL.has(run.status);
    const stopping = Boolean(run.cancel_requested_at) && !finished;
    replace(
      actions,
      finished
        ? null
        : h(
            "button",
            { type: "button", class: "button danger", disabled: stopping, onclick: () => act("Stop requested.", () => api.cancel(id)) },
            stopping ? "Stopping…" : "Stop",
          ),
      api.isAdmin && (run.status === "dead" || run.status === "cancelled")
        ? h("button", {
            type: "button",
            class: "button",
            onclick: () =>
              act("Requeued: the run is pending again.", async () => {
                await api.requeue(id);
                streamError = null;
                replace(streamNote);
              }),
          }, "Requeue")
        : null,
    );
  }

  function render() {
    title.replaceChildren("Run ", h("span", { class: "mono" }, shortId(id)));
    replace(badge, statusBadge(run.status));
    renderActions();
    waitpoint.show(run);
    replace(
      facts,
      fact("Run id", h("code", {}, run.id)),
      fact("Tenant", run.tenant_id),
      fact("Agent", run.agent),
      fact("Thread", run.thread_id ? h("a", { href: `#/threads/${run.thread_id}`, class: "mono", title: run.thread_id }, shortId(run.thread_id)) : null),
      fact("Attempts", `${run.attempts} of ${run.max_attempts}`),
      fact("Priority", String(run.priority)),
      fact("Usage", usageText(run.usage, run.budget)),
      fact("Created", ago(run.created_at)),
      fact("Updated", ago(run.updated_at)),
      fact("Finished", run.finished_at ? ago(run.finished_at) : null),
      fact("Stop requested", run.cancel_requested_at ? ago(run.cancel_requested_at) : null),
      fact("Cancel reason", run.cancel_reason),
      fact(run.status === "dead" ? "Error" : "Last error", run.error_code ? h("span", {}, h("code", {}, run.error_code), run.error_message ? ` ${run.error_message}` : "") : null),
      fact("Worker", run.locked_by ? h("code", {}, run.locked_by) : null),
      fact("Lease until", run.locked_until ? new Date(run.locked_until).toLocaleTimeString() : null),
    );
    replace(
      payloads,
      h("details", { class: "payload" }, h("summary", {}, "Input"), json(run.input)),
      Object.keys(run.budget ?? {}).length ? h("details", { class: "payload" }, h("summary", {}, "Budget"), json(run.budget)) : null,
      run.output !== null ? h("details", { class: "payload" }, h("summary", {}, "Output"), json(run.output)) : null,
    );
  }

  async function load() {
    try {
      run = await api.run(id);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      replace(message, notice(e instanceof ApiError && e.status === 404 ? "No such run." : `Could not load the run: ${e.message}`));
      return;
    }
    render();
    deliveries.load();
    stream?.retryNow(); // the API answers again: skip the rest of the back-off
    if (!stream?.running && !streamError && (!TERMINAL.has(run.status) || lastSeq < run.last_event_seq)) {
      follow();
    }
  }

  view.append(
    h(
      "section",
      { class: "page run-page" },
      h("a", { href: "#/runs", class: "back" }, "← Runs"),
      h("div", { class: "page-head" }, h("div", { class: "title-line" }, title, badge), actions),
      message,
      waitpoint.el,
      h("div", { class: "card" }, facts, payloads),
      deliveries.el,
      h("section", { class: "events", "aria-labelledby": "events-title" },
        h("div", { class: "section-head" }, h("h2", { id: "events-title" }, "Events"), streamState),
        streamNote,
        log.el,
      ),
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => {
    refresh.stop();
    stream?.stop();
  };
}
