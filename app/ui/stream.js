// A run's live event stream over EventSource, resumable across token expiry and network errors.
//
// EventSource cannot send an Authorization header, so every connection carries a fresh stream
// token in its URL. Its built-in reconnect would reuse that URL (and an expired token), so on any
// error we close it ourselves and reopen with a new token and ?after=<last seq seen>.

import { ApiError } from "./api.js";

const TERMINAL_EVENTS = new Set(["run.completed", "run.failed", "run.cancelled"]);
const EVENT_TYPES = [
  "run.queued", "run.started", "message.delta", "message.completed", "tool.call", "tool.result",
  "run.retrying", "run.cancel_requested", ...TERMINAL_EVENTS,
];
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 5_000;

export class RunStream {
  // onEvent({seq, type, data}) once per event, in seq order; onState("connecting" | "live" |
  // "reconnecting" | "ended" | "error", detail).
  constructor(api, runId, { onEvent, onState }) {
    this.api = api;
    this.runId = runId;
    this.onEvent = onEvent;
    this.onState = onState;
    this.lastSeq = 0;
    this.failures = 0;
    this.source = null;
    this.timer = null;
    this.stopped = true;
  }

  get running() {
    return !this.stopped;
  }

  start() {
    if (!this.stopped) return;
    this.stopped = false;
    this.onState("connecting");
    this.#open();
  }

  // The API answers again (the page's own polling saw it): skip the rest of the back-off.
  resume() {
    if (this.stopped || this.timer === null) return;
    clearTimeout(this.timer);
    this.timer = null;
    this.#open();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = null;
    this.source?.close();
    this.source = null;
  }

  async #open() {
    let token;
    try {
      ({ token } = await this.api.streamToken(this.runId));
    } catch (error) {
      if (error instanceof ApiError && [401, 403, 404].includes(error.status)) {
        this.stop();
        this.onState("error", error.message);
      } else {
        this.#retry();
      }
      return;
    }
    if (this.stopped) return;
    const params = new URLSearchParams({ token, after: String(this.lastSeq) });
    const source = new EventSource(`/runs/${this.runId}/events?${params}`);
    this.source = source;
    source.onopen = () => {
      this.failures = 0;
      this.onState("live");
    };
    source.onerror = () => {
      if (this.source !== source) return;
      source.close();
      this.source = null;
      this.#retry();
    };
    for (const type of EVENT_TYPES) source.addEventListener(type, (message) => this.#receive(type, message));
  }

  #receive(type, message) {
    const seq = Number(message.lastEventId);
    if (!(seq > this.lastSeq)) return; // a replay overlap is never shown twice
    this.lastSeq = seq;
    this.onEvent({ seq, type, data: JSON.parse(message.data) });
    if (TERMINAL_EVENTS.has(type)) {
      // The server closes after the terminal event; closing first keeps EventSource from retrying.
      this.stop();
      this.onState("ended");
    }
  }

  #retry() {
    if (this.stopped) return;
    const delay = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** this.failures);
    this.failures += 1;
    this.onState("reconnecting", delay);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.#open();
    }, delay);
  }
}
