// The team's backend in a few lines: it holds the tenant key, finds or creates the thread of a
// chat and hands the browser a token for that thread alone. It also serves the built page
// (dist/), so page and session share an origin and runq is called across origins (CORS).
//
//   RUNQ_URL=http://127.0.0.1:8000 RUNQ_KEY=rq_... RUNQ_CHAT_INPUT='{"tools":["shell"]}' \
//   PORT=8787 node session-endpoint.js
//
// Node only, no dependencies. A real backend would first check who the user is and whether
// the chat is theirs; this one trusts whoever asks.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DEV_PORT, HOST, SESSION_PORT, origin } from "./config.js";

const RUNQ_URL = (process.env.RUNQ_URL ?? "http://127.0.0.1:8000").replace(/\/$/, "");
// The URL the browser uses for runq, when it differs from the one this server uses.
const PUBLIC_RUNQ_URL = (process.env.RUNQ_PUBLIC_URL ?? RUNQ_URL).replace(/\/$/, "");
const RUNQ_KEY = process.env.RUNQ_KEY;
// What every run of these chats gets, whatever the browser sends: bound into the token.
const AGENT = process.env.RUNQ_CHAT_AGENT ?? "openai";
const INPUT = JSON.parse(process.env.RUNQ_CHAT_INPUT ?? "{}");
// The built page it serves: this example's, or another's (examples/langgraph-chat uses this endpoint too).
const DIST = resolve(process.env.RUNQ_CHAT_DIST ?? join(fileURLToPath(new URL(".", import.meta.url)), "dist"));
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".png": "image/png", ".svg": "image/svg+xml" };

if (!RUNQ_KEY) {
  console.error("RUNQ_KEY (a tenant key of runq) is needed");
  process.exit(2);
}

async function runq(method, path, body) {
  const response = await fetch(`${RUNQ_URL}${path}`, {
    method,
    headers: { Authorization: `Bearer ${RUNQ_KEY}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

// The chat id is the runq thread's id: a new chat gets a new thread, a known one must exist.
async function session(chatId) {
  let threadId = chatId;
  if (!threadId) {
    const created = await runq("POST", "/threads", { metadata: { source: "chat-example" } });
    if (created.status !== 201) return created;
    threadId = created.body.id;
  }
  const minted = await runq("POST", `/threads/${encodeURIComponent(threadId)}/token`, {
    agent: AGENT,
    input: INPUT,
  });
  if (minted.status !== 200 && minted.status !== 201) return minted;
  return {
    status: 200,
    body: { runq_url: PUBLIC_RUNQ_URL, chat_id: threadId, token: minted.body.token, expires_at: minted.body.expires_at },
  };
}

async function readJson(request) {
  let raw = "";
  for await (const chunk of request) raw += chunk;
  return raw ? JSON.parse(raw) : {};
}

async function serveFile(path, response) {
  const file = normalize(join(DIST, path === "/" ? "index.html" : path));
  if (!file.startsWith(DIST)) return send(response, 404, "text/plain", "not found");
  try {
    send(response, 200, TYPES[extname(file)] ?? "application/octet-stream", await readFile(file));
  } catch {
    send(response, 404, "text/plain", "not found (npm run build first)");
  }
}

function send(response, status, type, body) {
  response.writeHead(status, { "content-type": type });
  response.end(body);
}

createServer(async (request, response) => {
  try {
    const { pathname } = new URL(request.url, "http://localhost");
    if (request.method === "POST" && pathname === "/session") {
      const { chat_id: chatId } = await readJson(request);
      const answer = await session(typeof chatId === "string" ? chatId : null);
      return send(response, answer.status, "application/json", JSON.stringify(answer.body));
    }
    if (request.method === "GET") return serveFile(pathname, response);
    send(response, 405, "text/plain", "method not allowed");
  } catch (err) {
    send(response, 502, "text/plain", String(err));
  }
}).listen(SESSION_PORT, HOST, async () => {
  console.log(`chat page and session endpoint on ${origin(SESSION_PORT)}`);
  await checkCors(origin(SESSION_PORT), `(or ${origin(DEV_PORT)} for Vite's dev server, npm run dev)`);
});

// The page calls runq from another origin: ask runq now, as the browser will, whether it lets
// this one in, and say what to change if not, rather than leave the page to "Failed to fetch".
async function checkCors(pageOrigin, alternative) {
  try {
    const response = await fetch(`${PUBLIC_RUNQ_URL}/ai-sdk/chat`, {
      method: "OPTIONS",
      headers: { Origin: pageOrigin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type" },
    });
    if (response.headers.get("access-control-allow-origin") === pageOrigin) return;
    console.warn(`runq at ${PUBLIC_RUNQ_URL} does not let ${pageOrigin} call it: start runq with RUNQ_CORS_ORIGINS=${pageOrigin} ${alternative}`);
  } catch (err) {
    console.warn(`runq is not reachable at ${PUBLIC_RUNQ_URL} (${err.cause?.code ?? err.message}): start it first (make run)`);
  }
}
