import { useEffect, useMemo, useState } from "react";
import { useChat } from "@ai-sdk/react";
import {
  DefaultChatTransport,
  isToolUIPart,
  getToolName,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";
import { Session } from "./session.js";
import { describeError } from "./errors.js";

// The chat id lives in the URL (#<id>), so a reload reopens the same chat.
function chatIdFromUrl() {
  return decodeURIComponent(window.location.hash.slice(1)) || null;
}

export default function App() {
  const [loaded, setLoaded] = useState(null);
  const [error, setError] = useState(null);

  useEffect(() => {
    let cancelled = false;
    (async () => {
      const session = await Session.open(chatIdFromUrl());
      window.history.replaceState(null, "", `#${encodeURIComponent(session.chatId)}`);
      // The history of a reloaded page, approvals included; an answer still being written is
      // in it too, and useChat's resume replaces it with the replayed one (same message id).
      const response = await session.fetch(`/ai-sdk/chat/${encodeURIComponent(session.chatId)}/messages`);
      if (!response.ok) throw new Error(await response.text());
      const history = await response.json();
      if (!cancelled) setLoaded({ session, history: history.items });
    })().catch((err) => !cancelled && setError(describeError(err, Session.lastRunqUrl)));
    return () => {
      cancelled = true;
    };
  }, []);

  if (error) return <main className="chat"><p className="error" role="alert">{error}</p></main>;
  if (!loaded) return <main className="chat"><p className="muted">Connecting…</p></main>;
  return <Chat session={loaded.session} history={loaded.history} />;
}

function Chat({ session, history }) {
  const transport = useMemo(
    () =>
      new DefaultChatTransport({
        api: `${session.runqUrl}/ai-sdk/chat`,
        headers: () => session.headers(),
        // runq keeps the chat's history itself and reads only the newest message: send that
        // alone, so a long chat's requests stay small (the AI SDK's advice for such servers).
        prepareSendMessagesRequest: ({ id, messages, trigger, messageId, body }) => ({
          body: { ...body, id, messages: messages.slice(-1), trigger, messageId },
        }),
        // A reload asks runq for the answer in flight: GET /ai-sdk/chat/{id}/stream replays it
        // from its first event (204 when there is none), then follows it live.
        prepareReconnectToStreamRequest: async ({ id }) => ({
          api: `${session.runqUrl}/ai-sdk/chat/${encodeURIComponent(id)}/stream`,
          headers: await session.headers(),
        }),
      }),
    [session],
  );
  const { messages, sendMessage, status, stop, error, addToolApprovalResponse } = useChat({
    id: session.chatId,
    messages: history,
    transport,
    resume: true,
    // An approval answered with the buttons goes back to runq, which resumes the waiting run.
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [draft, setDraft] = useState("");
  const busy = status === "submitted" || status === "streaming";

  // Closing the stream never stops a run in runq (a reload must be able to resume it): Stop
  // aborts the stream and cancels the run, whose id is the answer's message id.
  async function stopAnswer() {
    const last = messages.at(-1);
    stop();
    if (last?.role === "assistant") await session.fetch(`/runs/${last.id}/cancel`, { method: "POST" });
  }

  function submit(event) {
    event.preventDefault();
    const text = draft.trim();
    if (!text || busy) return;
    sendMessage({ text });
    setDraft("");
  }

  return (
    <main className="chat">
      <header>
        <h1>runq chat</h1>
        <span className={`status status-${status}`} data-testid="status">{status}</span>
      </header>
      <ol className="messages" aria-label="Messages">
        {messages.map((message) => (
          <Message key={message.id} message={message} onApproval={addToolApprovalResponse} />
        ))}
      </ol>
      {error && <p className="error" role="alert">{describeError(error, session.runqUrl)}</p>}
      <form onSubmit={submit}>
        <textarea
          aria-label="Message"
          placeholder="Ask something…"
          value={draft}
          rows={2}
          onChange={(event) => setDraft(event.target.value)}
          onKeyDown={(event) => {
            if (event.key === "Enter" && !event.shiftKey) submit(event);
          }}
        />
        {busy ? (
          <button type="button" onClick={stopAnswer}>Stop</button>
        ) : (
          <button type="submit" disabled={!draft.trim()}>Send</button>
        )}
      </form>
    </main>
  );
}

function Message({ message, onApproval }) {
  return (
    <li className={`message message-${message.role}`} data-message-id={message.id}>
      <span className="role">{message.role === "user" ? "You" : "Agent"}</span>
      {message.parts.map((part, index) => {
        if (part.type === "text") return part.text ? <p key={index} className="text">{part.text}</p> : null;
        if (isToolUIPart(part)) return <ToolCall key={part.toolCallId} part={part} onApproval={onApproval} />;
        return null; // step boundaries and runq's own data-runq-* parts
      })}
    </li>
  );
}

function ToolCall({ part, onApproval }) {
  const name = getToolName(part);
  return (
    <div className={`tool tool-${part.state}`}>
      <div className="tool-head">
        <code>{name}</code> <span className="tool-state">{describe(part)}</span>
      </div>
      {part.input !== undefined && <pre className="tool-input">{JSON.stringify(part.input, null, 2)}</pre>}
      {part.state === "approval-requested" && (
        <div className="approval">
          <button type="button" onClick={() => onApproval({ id: part.approval.id, approved: true })}>
            Approve
          </button>
          <button
            type="button"
            className="secondary"
            onClick={() => onApproval({ id: part.approval.id, approved: false, reason: "denied in the chat" })}
          >
            Deny
          </button>
        </div>
      )}
      {part.state === "output-available" && <pre className="tool-output">{format(part.output)}</pre>}
      {part.state === "output-error" && <pre className="tool-output error">{part.errorText}</pre>}
    </div>
  );
}

const STATES = {
  "input-streaming": "preparing…",
  "input-available": "running…",
  "approval-requested": "waits for your approval",
  "approval-responded": "answered",
  "output-available": "done",
  "output-error": "failed",
  "output-denied": "denied",
};

function describe(part) {
  return STATES[part.state] ?? part.state;
}

function format(output) {
  return typeof output === "string" ? output : JSON.stringify(output, null, 2);
}
