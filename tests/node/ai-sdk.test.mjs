// The Vercel AI SDK v6 (`ai`) against a live runq: its own transport, chunk schema, stream
// reader and Chat class, as `useChat` uses them. Environment: RUNQ_URL, RUNQ_KEY (a tenant key).
// The fake model behind the `openai` agent is scripted by tests/protocols/test_ai_sdk.py, in the
// order of the approval tests below.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";

const URL_ = process.env.RUNQ_URL;
const AUTH = { Authorization: `Bearer ${process.env.RUNQ_KEY}` };
const DEMO = { agent: "demo", input: { steps: 2, step_s: 0.05 } };
const SLOW = { agent: "demo", input: { steps: 6, step_s: 0.4 } };
const APPROVALS = { agent: "openai", input: { tools: ["shell"], approve_tools: "*" } };

/** useChat's state, without React. */
class State {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = this.messages.map((old, i) => (i === index ? message : old));
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new State(messages) });
  }
}

const transport = () => new DefaultChatTransport({ api: `${URL_}/ai-sdk/chat`, headers: AUTH });

async function api(method, path, body) {
  const response = await fetch(`${URL_}${path}`, {
    method,
    headers: { ...AUTH, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, json: response.status === 204 ? null : await response.json() };
}

async function newChat() {
  return (await api("POST", "/threads", {})).json.id;
}

async function eventually(check, what, within = 20000) {
  const deadline = Date.now() + within;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const userMessage = (text) => ({ id: crypto.randomUUID(), role: "user", parts: [{ type: "text", text }] });
const textOf = (message) => message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const plain = (value) => JSON.parse(JSON.stringify(value));

async function lastMessage(chunks) {
  let last;
  for await (const message of readUIMessageStream({ stream: chunks })) last = message;
  return last;
}

async function finished(runId) {
  return eventually(async () => {
    const run = (await api("GET", `/runs/${runId}`)).json;
    return ["done", "dead", "cancelled"].includes(run.status) && run;
  }, `run ${runId} to finish`);
}

test("every frame is a valid chunk of ai v6's schema, with the protocol header", async () => {
  const chatId = await newChat();
  const response = await fetch(`${URL_}/ai-sdk/chat`, {
    method: "POST",
    headers: { ...AUTH, "content-type": "application/json" },
    body: JSON.stringify({ id: chatId, messages: [userMessage("schema check")], trigger: "submit-message", ...DEMO }),
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("x-vercel-ai-ui-message-stream"), "v1");
  const body = await response.text();
  assert.ok(!body.includes("\r"), "frames end in LF");
  const datas = body.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6));
  assert.equal(datas.at(-1), "[DONE]");
  for (const data of datas.slice(0, -1)) {
    const result = await uiMessageChunkSchema().validate(JSON.parse(data));
    assert.ok(result.success, `not a chunk: ${data}`);
  }
  // sendMessages + readUIMessageStream fold the run's message exactly as the history serves it.
  const chunks = await transport().sendMessages({
    chatId, messages: [userMessage("fold check")], trigger: "submit-message", messageId: undefined, body: DEMO,
  });
  const message = await lastMessage(chunks);
  assert.equal(textOf(message), "fold check");
  await finished(message.id);
  const history = (await api("GET", `/ai-sdk/chat/${chatId}/messages`)).json.items;
  assert.deepEqual(history.at(-1), plain(message));
});

test("the Chat class folds the run's message exactly as the history serves it", async () => {
  const chat = new Chat({ transport: transport() }); // the AI SDK's own chat id names a new thread
  const chatId = chat.id;
  await chat.sendMessage({ text: "hello from the chat" }, { body: DEMO });
  assert.equal(chat.status, "ready", String(chat.error));
  assert.deepEqual(chat.messages.map((m) => m.role), ["user", "assistant"]);
  const answer = chat.messages[1];
  assert.equal(answer.id, answer.metadata.run_id);
  const threadId = answer.metadata.thread_id;
  assert.equal((await api("GET", `/threads/${threadId}`)).json.chat_id, chatId);
  assert.equal(textOf(answer), "hello from the chat");
  assert.equal(answer.parts.filter((p) => p.type === "dynamic-tool" && p.state === "output-available").length, 2);
  await finished(answer.id);
  const history = (await api("GET", `/ai-sdk/chat/${chatId}/messages`)).json.items;
  assert.deepEqual(history[1], plain(answer));
  assert.equal(textOf(history[0]), "hello from the chat");

  // A second message on the chat id: the same thread, a second run.
  await chat.sendMessage({ text: "and again" }, { body: DEMO });
  assert.equal(chat.messages.length, 4);
  assert.equal(chat.messages[3].metadata.thread_id, threadId);
  const runs = (await api("GET", `/threads/${threadId}/runs`)).json.items;
  assert.deepEqual(runs.map((r) => r.id).reverse(), [chat.messages[1].id, chat.messages[3].id]);
  // Nothing in flight: the reconnect is null (204).
  assert.equal(await transport().reconnectToStream({ chatId }), null);
});

test("abort after a few chunks, then reconnect: the same message, no text twice, and no cancel", async () => {
  const chatId = await newChat();
  const prompt = "a slow answer that a reload interrupts";
  const abort = new AbortController();
  const first = await transport().sendMessages({
    chatId, messages: [userMessage(prompt)], trigger: "submit-message", messageId: undefined,
    abortSignal: abort.signal, body: SLOW,
  });
  const reader = first.getReader();
  const seen = [];
  while (seen.length < 4) seen.push((await reader.read()).value);
  abort.abort();
  const messageId = seen[0].messageId;
  assert.equal(seen[0].type, "start");

  // A reloaded page: the history (the answer in flight left out), then the resume.
  const history = (await api("GET", `/ai-sdk/chat/${chatId}/messages`)).json.items;
  assert.deepEqual(history.map((m) => m.role), ["user"]);
  const chat = new Chat({ id: chatId, transport: transport(), messages: history });
  await chat.resumeStream();
  assert.equal(chat.status, "ready", String(chat.error));
  assert.deepEqual(chat.messages.map((m) => m.role), ["user", "assistant"]);
  assert.equal(chat.messages[1].id, messageId);
  assert.equal(textOf(chat.messages[1]), prompt);
  assert.equal((await finished(messageId)).status, "done"); // the abort was not a Stop

  // Finished: nothing to resume, and the history serves the message the resume built.
  assert.equal(await transport().reconnectToStream({ chatId }), null);
  const served = (await api("GET", `/ai-sdk/chat/${chatId}/messages`)).json.items;
  assert.deepEqual(served[1], plain(chat.messages[1]));
});

test("POST /runs/{id}/cancel (Stop) ends the stream with abort", async () => {
  const chatId = await newChat();
  const stream = await transport().sendMessages({
    chatId, messages: [userMessage("stop me")], trigger: "submit-message", messageId: undefined, body: SLOW,
  });
  const chunks = [];
  let cancelled = false;
  for await (const chunk of stream) {
    chunks.push(chunk);
    if (!cancelled && chunk.type === "tool-input-available") {
      cancelled = true;
      assert.equal((await api("POST", `/runs/${chunks[0].messageId}/cancel`)).status, 202);
    }
  }
  assert.equal(chunks.at(-1).type, "abort");
  assert.equal((await finished(chunks[0].messageId)).status, "cancelled");
});

for (const approved of [true, false]) {
  test(`an approval ${approved ? "granted" : "denied"} resumes the same run, and the answer streams once`, async () => {
    const chatId = await newChat();
    const chat = new Chat({
      id: chatId,
      transport: transport(),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.sendMessage({ text: "run the command" }, { body: APPROVALS });
    assert.equal(chat.status, "ready", String(chat.error));
    const asking = chat.messages[1];
    const tool = asking.parts.find((p) => p.type === "dynamic-tool");
    assert.equal(tool.state, "approval-requested");
    assert.equal(tool.toolName, "shell");
    assert.equal((await api("GET", `/runs/${asking.id}`)).json.status, "waiting");
    // The reloaded page shows the request too.
    const history = (await api("GET", `/ai-sdk/chat/${chatId}/messages`)).json.items;
    assert.equal(history[1].parts.find((p) => p.type === "dynamic-tool").state, "approval-requested");

    await chat.addToolApprovalResponse({ id: tool.approval.id, approved, reason: approved ? undefined : "not now" });
    const expected = approved ? "it ran" : "it did not run";
    const done = await eventually(
      () => chat.status === "ready" && textOf(chat.messages[1]) === expected && chat.messages[1],
      "the continuation",
    );
    assert.equal(chat.status, "ready", String(chat.error));
    assert.equal(chat.messages.length, 2);
    assert.equal(done.id, asking.id);
    const tools = done.parts.filter((p) => p.type === "dynamic-tool");
    assert.equal(tools.length, 1, "one tool part");
    assert.equal(tools[0].state, approved ? "output-available" : "output-denied");
    const runs = (await api("GET", `/threads/${chatId}/runs`)).json.items;
    assert.equal(runs.length, 1);
    assert.equal((await finished(asking.id)).status, "done");
  });
}

test("a page with a thread token instead of a key: its own chat only", async () => {
  const chatId = await newChat();
  const { token } = (await api("POST", `/threads/${chatId}/token`, {})).json;
  const browser = () => new DefaultChatTransport({ api: `${URL_}/ai-sdk/chat`, headers: { Authorization: `Bearer ${token}` } });
  const chat = new Chat({ id: chatId, transport: browser() });
  await chat.sendMessage({ text: "with a token" }, { body: DEMO });
  assert.equal(chat.status, "ready", String(chat.error));
  assert.equal(textOf(chat.messages[1]), "with a token");
  const other = new Chat({ id: await newChat(), transport: browser() });
  await other.sendMessage({ text: "not mine" }, { body: DEMO });
  assert.equal(other.status, "error");
  assert.match(String(other.error), /another thread/);
});
