// One thread: the conversation, each run's messages with that run's events folded under them.

import { ApiError } from "../api.js";
import { ago, h, json, notice, replace, shortId, statusBadge } from "../dom.js";
import { EventLog } from "../events.js";
import { autoRefresh } from "./refresh.js";

const REFRESH_MS = 2000;

function content(message) {
  if (typeof message.content === "string") return h("p", { class: "message-content" }, message.content);
  return message.content === null || message.content === undefined ? null : json(message.content);
}

function bubble(message) {
  const calls = message.tool_calls ?? [];
  return h(
    "li",
    { class: `chat-message role-${message.role}`, dataset: { index: String(message.index) } },
    h("span", { class: "chat-role" }, message.role === "tool" ? `tool ${message.tool_call_id ?? ""}` : message.role),
    content(message),
    calls.map((call) => h("p", { class: "chat-call mono" }, `${call.function?.name ?? "?"}(${call.function?.arguments ?? ""})`)),
  );
}

// The events of one run, read once when its fold is first opened (a finished run's log does not change).
function eventsFold(api, run) {
  const log = new EventLog();
  const fold = h("details", { class: "run-events" }, h("summary", {}, `Events of run ${shortId(run.id)}`), log.el);
  let loaded = false;
  fold.addEventListener("toggle", async () => {
    if (!fold.open || loaded) return;
    loaded = true;
    try {
      let after = 0;
      for (;;) {
        const page = await api.events(run.id, { after });
        for (const event of page.items) log.add(event);
        if (page.next_after === null) break;
        after = page.next_after;
      }
    } catch (e) {
      loaded = false;
      fold.append(notice(`Could not load the events: ${e.message}`));
    }
  });
  return fold;
}

function turn(api, run, messages) {
  return h(
    "li",
    { class: "thread-turn", dataset: { runId: run.id } },
    h(
      "div",
      { class: "turn-head" },
      h("a", { href: `#/runs/${run.id}`, class: "mono", title: run.id }, `Run ${shortId(run.id)}`),
      statusBadge(run.status),
      run.cancel_reason ? h("span", { class: "muted" }, run.cancel_reason) : null,
      ago(run.created_at),
    ),
    messages.length ? h("ol", { class: "chat" }, messages.map(bubble)) : h("p", { class: "muted" }, "No messages from this run."),
    eventsFold(api, run),
  );
}

export function mountThread(view, { api, route }) {
  const id = route.id;
  const title = h("h1", {}, "Thread ", h("span", { class: "mono" }, shortId(id)));
  const badge = h("span");
  const message = h("div");
  const facts = h("dl", { class: "facts" });
  const conversation = h("ol", { class: "conversation", "aria-label": "Conversation" });
  let shown = ""; // what the conversation was last drawn from: redraw (and close folds) only on change

  async function load() {
    let thread, messages, runs;
    try {
      [thread, messages, runs] = await Promise.all([api.thread(id), api.threadMessages(id), api.threadRuns(id)]);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      replace(message, notice(e instanceof ApiError && e.status === 404 ? "No such thread (a thread is shown to its tenant's key)." : `Could not load the thread: ${e.message}`));
      return;
    }
    replace(message);
    replace(badge, statusBadge(thread.status));
    replace(
      facts,
      h("dt", {}, "Thread id"), h("dd", {}, h("code", {}, thread.id)),
      h("dt", {}, "Messages"), h("dd", {}, String(thread.message_count)),
      h("dt", {}, "Created"), h("dd", {}, ago(thread.created_at)),
      Object.keys(thread.metadata).length ? [h("dt", {}, "Metadata"), h("dd", {}, json(thread.metadata))] : null,
    );
    const state = JSON.stringify([messages.items.map((m) => m.index), runs.items.map((r) => [r.id, r.status])]);
    if (state === shown) return;
    shown = state;
    const byRun = new Map();
    for (const m of messages.items) byRun.set(m.run_id, [...(byRun.get(m.run_id) ?? []), m]);
    const known = new Set(runs.items.map((r) => r.id));
    // Messages of runs retention already purged come first, as they are the oldest.
    const orphans = messages.items.filter((m) => !known.has(m.run_id));
    replace(
      conversation,
      orphans.length ? h("li", { class: "thread-turn" }, h("ol", { class: "chat" }, orphans.map(bubble))) : null,
      [...runs.items].reverse().map((run) => turn(api, run, byRun.get(run.id) ?? [])),
    );
    if (!runs.items.length && !orphans.length) replace(conversation, h("li", { class: "empty" }, "No runs in this thread yet."));
  }

  view.append(
    h(
      "section",
      { class: "page thread-page" },
      h("a", { href: "#/threads", class: "back" }, "← Threads"),
      h("div", { class: "page-head" }, h("div", { class: "title-line" }, title, badge)),
      message,
      h("div", { class: "card" }, facts),
      h("section", { class: "events", "aria-labelledby": "conversation-title" }, h("h2", { id: "conversation-title" }, "Conversation"), conversation),
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => refresh.stop();
}
