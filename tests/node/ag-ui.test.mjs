// @ag-ui/client's HttpAgent against a live runq (run from tests/protocols/test_ag_ui.py):
// every stream passes the client's own schema and sequence verification.
import { test } from "node:test";
import assert from "node:assert/strict";
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const URL_ = process.env.RUNQ_URL;
const headers = { Authorization: `Bearer ${process.env.RUNQ_KEY}` };

// A fetch that remembers the last `id:` it passed on and, when asked, ends the body cleanly
// after `cutAfter` frames (at a frame whose successor has another id): a dropped connection.
function trackingFetch({ cutAfter } = {}) {
  const seen = { lastEventId: null, frames: 0 };
  const fetchFn = async (url, init) => {
    const response = await fetch(url, init);
    if (!response.ok || cutAfter === undefined) return response;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const encoder = new TextEncoder();
    let buffer = "";
    const body = new ReadableStream({
      async pull(controller) {
        for (;;) {
          const parts = buffer.split("\n\n");
          if (parts.length > 2 || (parts.length === 2 && seen.frames < cutAfter)) {
            const frame = parts.shift();
            buffer = parts.join("\n\n");
            const id = /^id: (\d+)$/m.exec(frame)?.[1];
            const nextId = /^id: (\d+)$/m.exec(parts[0] ?? "")?.[1];
            seen.frames += 1;
            seen.lastEventId = id ?? seen.lastEventId;
            controller.enqueue(encoder.encode(frame + "\n\n"));
            if (seen.frames >= cutAfter && nextId !== undefined && nextId !== id) {
              await reader.cancel();
              controller.close();
            }
            return;
          }
          const { done, value } = await reader.read();
          if (done) {
            if (buffer) controller.enqueue(encoder.encode(buffer));
            controller.close();
            return;
          }
          buffer += decoder.decode(value, { stream: true });
        }
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  return { fetchFn, seen };
}

// runq's resume extension as AG-UI's connect(): GET /ag-ui/runs/{runId}/events after an id.
class ResumableAgent extends HttpAgent {
  after = 0;
  connect(input) {
    const url = `${URL_}/ag-ui/runs/${input.runId}/events?after=${this.after}`;
    const init = { headers: { ...this.headers, Accept: "text/event-stream" }, signal: this.abortController.signal };
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url, init)));
  }
}

function agent(extra = {}) {
  return new HttpAgent({ url: `${URL_}/ag-ui/demo`, headers, ...extra });
}

function recorder() {
  const events = [];
  return { events, subscriber: { onEvent: ({ event }) => void events.push(event) } };
}

function assistantText(messages) {
  return messages.filter((m) => m.role === "assistant").map((m) => m.content ?? "").join("");
}

test("a prompt streams back as one text message and the run finishes with its output", async () => {
  const a = agent();
  a.addMessage({ id: "u1", role: "user", content: "hello from AG-UI" });
  const { events, subscriber } = recorder();
  const { result, newMessages } = await a.runAgent({ forwardedProps: { input: { steps: 0 } } }, subscriber);
  assert.equal(events[0].type, "RUN_STARTED");
  assert.equal(events[0].threadId, a.threadId);
  const runq = events.find((e) => e.type === "CUSTOM" && e.name === "runq.run").value;
  assert.match(runq.run_id, /^[0-9a-f-]{36}$/);
  assert.equal(events.at(-1).type, "RUN_FINISHED");
  assert.deepEqual(events.at(-1).outcome, { type: "success" });
  assert.equal(result.text, "hello from AG-UI");
  assert.equal(newMessages.length, 1);
  assert.ok(newMessages[0].id.startsWith(`${runq.run_id}:`), newMessages[0].id);
  assert.equal(newMessages[0].content, "hello from AG-UI");
  for (const e of events) assert.ok(!JSON.stringify(e).includes("null"), `no null in ${e.type}`);
});

test("tool calls and results become messages, with ids unique across the runs of a thread", async () => {
  const a = agent();
  a.addMessage({ id: "u1", role: "user", content: "first" });
  await a.runAgent({ forwardedProps: { input: { steps: 2, step_s: 0 } } });
  a.addMessage({ id: "u2", role: "user", content: "second" });
  await a.runAgent({ forwardedProps: { input: { steps: 2, step_s: 0 } } });
  const calls = a.messages.flatMap((m) => m.toolCalls ?? []);
  assert.equal(calls.length, 4, JSON.stringify(a.messages));
  assert.equal(new Set(calls.map((c) => c.id)).size, 4);
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { seconds: 0 });
  const results = a.messages.filter((m) => m.role === "tool");
  assert.deepEqual(results.map((m) => m.content), [
    "step 1 of 2 done", "step 2 of 2 done", "step 1 of 2 done", "step 2 of 2 done",
  ]);
  assert.equal(assistantText(a.messages), "firstsecond");
});

test("a wait is an interrupt, and a resume entry continues the same run", async () => {
  const a = agent();
  a.addMessage({ id: "u1", role: "user", content: "needs review" });
  const first = recorder();
  await a.runAgent({ forwardedProps: { input: { steps: 0, wait: "review" } } }, first.subscriber);
  const finished = first.events.at(-1);
  assert.equal(finished.outcome.type, "interrupt");
  assert.equal(a.pendingInterrupts.length, 1);
  const [interrupt] = a.pendingInterrupts;
  assert.equal(interrupt.reason, "review");
  assert.deepEqual(interrupt.metadata, { payload: { prompt: "needs review" } });
  const runId = first.events.find((e) => e.name === "runq.run").value.run_id;

  const second = recorder();
  const { result } = await a.runAgent(
    { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { ok: true } }] },
    second.subscriber,
  );
  assert.equal(second.events.find((e) => e.name === "runq.run").value.run_id, runId);
  assert.equal(second.events.find((e) => e.type === "CUSTOM" && e.name !== "runq.run").name, "runq.run.resumed");
  assert.deepEqual(result.resumed_with, { ok: true });
  assert.equal(a.pendingInterrupts.length, 0);
  assert.equal(assistantText(a.messages), "needs review"); // the prompt streamed once
});

test("a cancel ends the stream with the cancelled outcome", async () => {
  const a = agent();
  a.addMessage({ id: "u1", role: "user", content: "long" });
  let outcome;
  await a.runAgent({ forwardedProps: { input: { steps: 100, step_s: 0.2 } } }, {
    onCustomEvent: async ({ event }) => {
      if (event.name !== "runq.run") return;
      const response = await fetch(`${URL_}/runs/${event.value.run_id}/cancel`, { method: "POST", headers });
      assert.equal(response.status, 202);
    },
    onRunFinishedEvent: (params) => void (outcome = params.outcome),
  });
  assert.equal(outcome, "cancelled");
});

test("a repeated runId streams the same run instead of starting another", async () => {
  const threadId = `chat-${Date.now()}`;
  const runId = crypto.randomUUID();
  const runOnce = async () => {
    const a = agent({ threadId });
    a.addMessage({ id: "u1", role: "user", content: "only once" });
    const { events, subscriber } = recorder();
    await a.runAgent({ runId, forwardedProps: { input: { steps: 1, step_s: 0 } } }, subscriber);
    return { events, messages: a.messages };
  };
  const first = await runOnce();
  const second = await runOnce();
  assert.deepEqual(second.messages, first.messages);
  assert.deepEqual(second.events, first.events);
  const runqThread = first.events.find((e) => e.name === "runq.run").value.thread_id;
  const runs = await (await fetch(`${URL_}/threads/${runqThread}/runs`, { headers })).json();
  assert.equal(runs.items.length, 1);
});

test("a dropped stream resumes after its last id with connectAgent, no text twice", async () => {
  const prompt = "one two three four five six seven eight nine ten";
  const { fetchFn, seen } = trackingFetch({ cutAfter: 6 });
  const a = new ResumableAgent({ url: `${URL_}/ag-ui/demo`, headers, fetch: fetchFn });
  a.addMessage({ id: "u1", role: "user", content: prompt });
  const runId = crypto.randomUUID();
  await a.runAgent({ runId, forwardedProps: { input: { steps: 1, step_s: 0 } } });
  assert.ok(seen.lastEventId > 0, "the cut came mid-run");
  const partial = assistantText(a.messages);
  // the cut comes after the first delta (the worker may coalesce every word into it)
  assert.ok(partial.length > 0 && prompt.startsWith(partial), partial);
  const messageId = a.messages.find((m) => m.role === "assistant").id;

  a.after = Number(seen.lastEventId);
  a.fetch = (url, init) => fetch(url, init);
  const { events, subscriber } = recorder();
  await a.connectAgent({ runId }, subscriber);
  // the message open at the cut is opened again (same id), then continues
  assert.deepEqual(events.slice(0, 4).map((e) => e.type), ["RUN_STARTED", "CUSTOM", "STEP_STARTED", "TEXT_MESSAGE_START"]);
  assert.equal(events[3].messageId, messageId);
  assert.deepEqual(events.at(-1).outcome, { type: "success" });
  assert.equal(assistantText(a.messages), prompt);
  assert.equal(a.messages.filter((m) => m.role === "assistant" && m.content).length, 1);
});

test("every frame carries the id of its event, and ?after= and Last-Event-ID resume", async () => {
  const a = agent();
  a.addMessage({ id: "u1", role: "user", content: "ids please" });
  const { events, subscriber } = recorder();
  await a.runAgent({ forwardedProps: { input: { steps: 1, step_s: 0 } } }, subscriber);
  const runId = events.find((e) => e.name === "runq.run").value.run_id;
  const read = async (query, extra = {}) => {
    const response = await fetch(`${URL_}/ag-ui/runs/${runId}/events${query}`, { headers: { ...headers, ...extra } });
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.ok(!text.includes("\r"), "LF only");
    return text.split("\n\n").filter(Boolean).map((f) => ({
      id: Number(/^id: (\d+)$/m.exec(f)[1]),
      event: JSON.parse(/^data: (.*)$/m.exec(f)[1]),
    }));
  };
  const all = await read("");
  assert.deepEqual(all.map((f) => f.event.type), events.map((e) => e.type));
  const ids = all.map((f) => f.id);
  assert.deepEqual(ids, [...ids].sort((x, y) => x - y));
  const cut = all.find((f) => f.event.type === "TOOL_CALL_START").id;
  for (const resumed of [await read(`?after=${cut}`), await read("", { "Last-Event-ID": String(cut) })]) {
    assert.deepEqual(resumed.slice(0, 3).map((f) => f.event.type), ["RUN_STARTED", "CUSTOM", "STEP_STARTED"]);
    assert.deepEqual(resumed.slice(3), all.filter((f) => f.id > cut));
  }
});
