// The LangGraph SDK (`@langchain/langgraph-sdk` 1.15, npm's latest) against runq's /langgraph: its
// own Client, as useStream drives it. Environment: RUNQ_URL, RUNQ_KEY (a tenant key). The graph
// is `counter` of tests/langgraph_server/app (two nodes, a custom event in the first).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: `${process.env.RUNQ_URL}/langgraph`, apiKey: process.env.RUNQ_KEY });
const MODES = ["values", "updates", "custom"];

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

async function streamedRun() {
  const thread = await client.threads.create({ metadata: { from: "node" } });
  let created;
  const parts = await collect(
    client.runs.stream(thread.thread_id, "counter", {
      input: { count: 1 },
      streamMode: MODES,
      onRunCreated: (meta) => (created = meta),
    }),
  );
  return { thread, created, parts };
}

test("a thread is created and a run streams the modes asked for, each frame with an id", async () => {
  const { thread, created, parts } = await streamedRun();
  assert.match(thread.thread_id, /^[0-9a-f-]{36}$/);
  assert.equal(created.thread_id, thread.thread_id); // from Content-Location
  assert.equal(parts[0].event, "metadata");
  assert.equal(parts[0].data.run_id, created.run_id);
  assert.deepEqual(parts.filter((p) => p.event === "values").at(-1).data, { count: 20, steps: ["one", "two"] });
  assert.deepEqual(parts.filter((p) => p.event === "custom").map((p) => p.data), [{ at: "one", count: 1 }]);
  assert.deepEqual(parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)), [["one"], ["two"]]);
  const ids = parts.map((p) => Number(p.id));
  assert.ok(ids.every((id, i) => Number.isInteger(id) && (i === 0 || id >= ids[i - 1])), `ids ${ids}`);
  const run = await client.runs.get(thread.thread_id, created.run_id);
  assert.equal(run.status, "success");
});

test("joinStream with a Last-Event-ID gives the frames after it, nothing twice", async () => {
  const { thread, created, parts } = await streamedRun();
  const cut = parts.findIndex((p) => p.event === "custom");
  const joined = await collect(client.runs.joinStream(thread.thread_id, created.run_id, { lastEventId: parts[cut].id }));
  const after = parts.filter((p) => Number(p.id) > Number(parts[cut].id));
  assert.ok(after.length > 0);
  assert.deepEqual(joined.map((p) => [p.id, p.event, p.data]), after.map((p) => [p.id, p.event, p.data]));
});

test("the store and crons answer the SDK's calls", async () => {
  await client.store.putItem(["node", "memories"], "m1", { text: "likes tea" });
  assert.deepEqual((await client.store.getItem(["node", "memories"], "m1")).value, { text: "likes tea" });
  const found = await client.store.searchItems(["node"], { filter: { text: "likes tea" } });
  assert.deepEqual(found.items.map((i) => i.key), ["m1"]);
  assert.deepEqual((await client.store.listNamespaces({ prefix: ["node"] })).namespaces, [["node", "memories"]]);
  await client.store.deleteItem(["node", "memories"], "m1");
  assert.equal(await client.store.getItem(["node", "memories"], "m1"), null);

  const cron = await client.crons.create("counter", { schedule: "0 9 * * *", input: { count: 1 } });
  assert.equal(cron.schedule, "0 9 * * *");
  assert.deepEqual((await client.crons.search({ assistantId: "counter" })).map((c) => c.cron_id), [cron.cron_id]);
  assert.equal(await client.crons.count({ assistantId: "counter" }), 1);
  await client.crons.delete(cron.cron_id);
  assert.equal(await client.crons.count({ assistantId: "counter" }), 0);
});
