// The browser never holds a tenant key: it asks the team's backend (session-endpoint.js here) for
// a token of one thread, and asks again shortly before that token expires.

const REFRESH_BEFORE_MS = 30_000;

export class Session {
  constructor(answer) {
    this.update(answer);
  }

  /** POST /session: the thread of `chatId` (a new one when it is empty) and a token for it. */
  static async open(chatId) {
    return new Session(await requestSession(chatId));
  }

  update({ runq_url, chat_id, token, expires_at }) {
    this.runqUrl = runq_url;
    Session.lastRunqUrl = runq_url; // for an error before the chat is open
    this.chatId = chat_id;
    this.token = token;
    this.expiresAt = Date.parse(expires_at);
  }

  /** The Authorization header, with a fresh token when the current one is about to expire. */
  async headers() {
    if (this.expiresAt - Date.now() < REFRESH_BEFORE_MS) {
      this.update(await requestSession(this.chatId));
    }
    return { Authorization: `Bearer ${this.token}` };
  }

  /** A call to runq with the thread token (history, cancel). */
  async fetch(path, init = {}) {
    const headers = { ...(init.headers ?? {}), ...(await this.headers()) };
    return fetch(`${this.runqUrl}${path}`, { ...init, headers });
  }
}

async function requestSession(chatId) {
  const response = await fetch("/session", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(chatId ? { chat_id: chatId } : {}),
  });
  if (!response.ok) throw new Error(`The session endpoint answered ${response.status}: ${await response.text()}`);
  return response.json();
}
