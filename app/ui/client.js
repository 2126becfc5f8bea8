// runq's browser client (an ES module, no dependency, no build step), served at /client.js.
//
//   import { followRun } from "/client.js";
//   const follower = followRun(runId, {
//     getToken: (runId, scopes) => myBackend.streamToken(runId, scopes), // POST /runs/{id}/stream-token
//     onEvent: ({ seq, type, data }) => render(type, data),
//     onEnd: ({ event, error }) => done(event ?? error),
//   });
//
// EventSource cannot send an Authorization header, so each connection carries a short-lived
// stream token in its URL. EventSource's own reconnect would reuse that URL, expired token and
// all, and stop for good on the 401; so on any error we close it and reopen it ourselves with
// a token that is still valid and ?after=<the last seq delivered>. The server numbers a run's
// events 1, 2, 3, ... without gaps, so "deliver only seq = last + 1" is the whole rule: nothing
// is delivered twice, and a gap (an event type this module does not listen for) is filled from
// the JSON page of events before the stream goes on.
//
// A connection can also die without a word (a half-open TCP connection, a proxy that stalls):
// EventSource then waits forever. The server sends a keep-alive at least every 15 s, as a `ping`
// event because this module asks for one (?keepalive=event: EventSource does not show comments),
// so a connection that brings nothing for `silenceMs` (default twice that) is closed and resumed.

export const TERMINAL_EVENTS = new Set(["run.completed", "run.failed", "run.cancelled"]);
const EVENT_TYPES = [
  "run.queued", "run.started", "message.delta", "message.completed", "tool.call", "tool.result",
  "run.retrying", "run.cancel_requested", "run.waiting", "run.resumed", "message", ...TERMINAL_EVENTS,
];
const FATAL = new Set([401, 403, 404]); // from getToken: the caller may not follow this run
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 5_000;
const REFRESH_AT = 0.8; // of a token's lifetime: a reconnect after that fetches a new one first
const PAGE = 1000;
const REQUEST_TIMEOUT_MS = 15_000; // fetch has none of its own: a request lost on the way hangs
const SILENCE_MS = 30_000; // twice the longest the server waits between keep-alives

// An error answer of the API (an RFC 9457 problem), or status 0 when it could not be reached.
// retryAfterMs: the server's Retry-After (a 429 at a tenant limit, a 503), when it sent one.
export class RunqError extends Error {
  constructor(status, code, detail, retryAfterMs = null) {
    super(detail || code || `HTTP ${status}`);
    this.name = "RunqError";
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }
}

// Retry-After as milliseconds (delta-seconds or an HTTP date), null when absent or unreadable.
export function retryAfterMs(value) {
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

async function call(url, init) {
  let response;
  try {
    response = await fetch(url, { ...init, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  } catch (error) {
    throw new RunqError(0, "network_error", `the API cannot be reached (${error.message})`);
  }
  const body = await response.json().catch(() => undefined);
  if (!response.ok) {
    throw new RunqError(response.status, body?.code, body?.detail, retryAfterMs(response.headers.get("Retry-After")));
  }
  // A 200 whose body was cut off on the way is a lost answer, not an empty one.
  if (body === undefined && response.status !== 204) throw new RunqError(0, "network_error", "the answer was cut off");
  return body;
}

// A caller's promise (getToken) that may never settle, bounded like our own requests.
function bounded(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new RunqError(0, "timeout", `${what} did not answer`)), REQUEST_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function runPath(baseUrl, runId, tail) {
  return `${baseUrl}/runs/${encodeURIComponent(runId)}/${tail}`;
}

// Follow a run's events from seq `after` until its terminal event; returns a handle with
// stop(), retryNow() (skip the current back-off), lastSeq and running.
//   getToken(runId, scopes) -> {token, expires_at} (the stream-token answer) or a token string
//   onEvent({seq, type, data}) once per event, in seq order
//   onEnd({event}) after the terminal event, or onEnd({error}) when following cannot go on
//   onState("connecting" | "live" | "reconnecting" | "ended" | "error", detail) for a status line
//   silenceMs: a connection that brings nothing (not even a keep-alive) this long is resumed anew
export function followRun(runId, {
  getToken, onEvent, onEnd = () => {}, onState = () => {}, after = 0, baseUrl = "", silenceMs = SILENCE_MS,
}) {
  const follower = new Follower(runId, { getToken, onEvent, onEnd, onState, after, baseUrl, silenceMs });
  follower.start();
  return follower;
}

// Resume a waiting run (an approval, say) with a token that has the "resume" scope.
export async function resumeRun(runId, value, { token, getToken, waitpointId, baseUrl = "" } = {}) {
  const resumeToken = token ?? tokenOf(await getToken(runId, ["read", "resume"])).token;
  const body = waitpointId ? { value, waitpoint_id: waitpointId } : { value };
  return call(`${runPath(baseUrl, runId, "resume")}?${new URLSearchParams({ token: resumeToken })}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
}

function tokenOf(answer) {
  if (typeof answer === "string") return { token: answer, expiresAt: null };
  return { token: answer.token, expiresAt: answer.expires_at ? Date.parse(answer.expires_at) : null };
}

class Follower {
  #source = null;
  #token = null;
  #refreshAt = 0;
  #refreshTimer = null;
  #retryTimer = null;
  #silenceTimer = null;
  #failures = 0;
  #stopped = false;

  constructor(runId, options) {
    this.runId = runId;
    this.options = options;
    this.lastSeq = Number(options.after) || 0;
  }

  get running() {
    return !this.#stopped;
  }

  start() {
    this.options.onState("connecting");
    this.#connect();
  }

  stop() {
    this.#stopped = true;
    clearTimeout(this.#retryTimer);
    clearTimeout(this.#refreshTimer);
    this.#close();
  }

  retryNow() {
    if (this.#stopped || this.#retryTimer === null) return;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    this.#connect();
  }

  // A token still valid for a while: the cached one, or a new one (always after a failure,
  // which may have been the server refusing an expired token).
  async #freshToken(force) {
    if (!force && this.#token && Date.now() < this.#refreshAt) return this.#token;
    const { token, expiresAt } = tokenOf(await bounded(this.options.getToken(this.runId, ["read"]), "getToken"));
    this.#token = token;
    clearTimeout(this.#refreshTimer);
    this.#refreshAt = 0;
    if (expiresAt && !this.#stopped) {
      const now = Date.now();
      this.#refreshAt = now + Math.max(0, expiresAt - now) * REFRESH_AT;
      // Fetched ahead, so a reconnect after the refresh point does not wait for a round trip.
      this.#refreshTimer = setTimeout(() => this.#freshToken(true).catch(() => {}), this.#refreshAt - now);
    }
    return token;
  }

  async #connect(force = false) {
    let token;
    try {
      token = await this.#freshToken(force);
    } catch (error) {
      if (FATAL.has(error?.status)) this.#fail(error);
      else this.#retry(error?.retryAfterMs);
      return;
    }
    if (this.#stopped) return;
    const params = new URLSearchParams({ token, after: String(this.lastSeq), keepalive: "event" });
    const source = new EventSource(`${runPath(this.options.baseUrl, this.runId, "events")}?${params}`);
    this.#source = source;
    let progress = false;
    const lost = () => {
      if (this.#source !== source) return;
      this.#close();
      if (progress) {
        this.#failures = 0;
        this.options.onState("reconnecting", 0);
        this.#connect();
      } else {
        this.#catchUp(token); // why did it close? the JSON page of events tells
      }
    };
    // Armed from the start: a connection may also stall before its answer's headers.
    const heard = () => {
      clearTimeout(this.#silenceTimer);
      this.#silenceTimer = setTimeout(lost, this.options.silenceMs);
    };
    heard();
    source.onopen = () => {
      if (this.#source !== source) return;
      heard();
      this.options.onState("live");
    };
    source.onerror = lost;
    source.addEventListener("ping", () => {
      if (this.#source === source) heard();
    });
    const receive = (message) => {
      if (this.#source !== source) return;
      heard();
      const seq = Number(message.lastEventId);
      if (!(seq > this.lastSeq)) return; // a replay overlap
      if (seq > this.lastSeq + 1) {
        // An event type we do not listen for was skipped: fetch what is missing, then go on.
        this.#close();
        this.#catchUp(token);
        return;
      }
      progress = true;
      this.#deliver({ seq, type: message.type, data: JSON.parse(message.data) });
    };
    for (const type of EVENT_TYPES) source.addEventListener(type, receive);
  }

  #close() {
    clearTimeout(this.#silenceTimer);
    this.#source?.close();
    this.#source = null;
  }

  #deliver(event) {
    if (this.#stopped || event.seq !== this.lastSeq + 1) return;
    this.lastSeq = event.seq;
    this.options.onEvent(event);
    if (TERMINAL_EVENTS.has(event.type)) {
      this.stop();
      this.options.onState("ended");
      this.options.onEnd({ event });
    }
  }

  // After a connection that brought nothing (or skipped a seq), read the stored events after the
  // one before the cursor: a run that already ended shows its terminal event there (the stream
  // itself closes at once with nothing to send), and missing events are delivered from it. The
  // status of that request says what the EventSource could not: 401 means a new token.
  async #catchUp(token) {
    const params = new URLSearchParams({ token, after: String(Math.max(0, this.lastSeq - 1)), limit: String(PAGE) });
    let page;
    try {
      page = await call(`${runPath(this.options.baseUrl, this.runId, "events")}?${params}`, {
        headers: { Accept: "application/json" },
      });
    } catch (error) {
      if (error.status === 401) this.#token = null;
      if (error.status === 404 || error.status === 403) this.#fail(error);
      else this.#retry(error.retryAfterMs);
      return;
    }
    if (this.#stopped) return;
    const [first] = page.items;
    if (first && first.seq === this.lastSeq && TERMINAL_EVENTS.has(first.type) && page.items.length === 1) {
      this.stop();
      this.options.onState("ended");
      this.options.onEnd({ event: { seq: first.seq, type: first.type, data: first.data } });
      return;
    }
    const before = this.lastSeq;
    for (const { seq, type, data } of page.items) this.#deliver({ seq, type, data });
    if (this.#stopped) return;
    if (this.lastSeq > before) {
      this.#failures = 0;
      this.#connect();
    } else {
      this.#retry();
    }
  }

  // The back-off, or the server's Retry-After when it gave one (a 429 at the tenant's limit),
  // and up to half of it again at random: streams refused together do not come back together.
  #retry(retryAfter = null) {
    if (this.#stopped) return;
    const backoff = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** this.#failures) * (0.5 + Math.random() / 2);
    const delay = retryAfter === null ? backoff : retryAfter * (1 + Math.random() / 2);
    this.#failures += 1;
    this.options.onState("reconnecting", delay);
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      this.#connect(true);
    }, delay);
  }

  #fail(error) {
    this.stop();
    this.options.onState("error", error.message);
    this.options.onEnd({ error });
  }
}
