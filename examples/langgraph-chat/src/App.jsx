import { useEffect, useState } from "react";
import { useStream } from "@langchain/langgraph-sdk/react";
import { Session } from "../../chat/src/session.js";
import { describeError } from "../../chat/src/errors.js";

// The graph of this folder's langgraph.json; runq serves it under /langgraph, as LangGraph's
// server would at its root. The chat id in the URL (#<id>) is the thread's, so a reload
// reopens the same chat.
const ASSISTANT = "chat";

function chatIdFromUrl() {
  return decodeURIComponent(window.location.hash.slice(1)) || null;
}

export default function App() {
  const [session, setSession] = useState(null);
  const [error, setError] = useState(null);

  useEffect(() => {
    let cancelled = false;
    Session.open(chatIdFromUrl())
      .then((opened) => {
        window.history.replaceState(null, "", `#${encodeURIComponent(opened.chatId)}`);
        if (!cancelled) setSession(opened);
      })
      .catch((err) => !cancelled && setError(describeError(err, Session.lastRunqUrl)));
    return () => {
      cancelled = true;
    };
  }, []);

  if (error) return <main className="chat"><p className="error" role="alert">{error}</p></main>;
  if (!session) return <main className="chat"><p className="muted">Connecting…</p></main>;
  return <Chat session={session} />;
}

function Chat({ session }) {
  // The browser holds a token for this one thread (runq's §15.3), never the tenant key; the
  // SDK sends it as its API key. reconnectOnMount keeps the running run's id in sessionStorage
  // and, after a reload, joins that run's stream: runq replays it from its log, then follows it.
  const stream = useStream({
    apiUrl: `${session.runqUrl}/langgraph`,
    apiKey: session.token,
    assistantId: ASSISTANT,
    threadId: session.chatId,
    messagesKey: "messages",
    reconnectOnMount: true,
  });
  const [draft, setDraft] = useState("");
  const question = stream.interrupt?.value?.question;

  function send(event) {
    event.preventDefault();
    const text = draft.trim();
    if (!text || stream.isLoading) return;
    setDraft("");
    stream.submit({ messages: [{ type: "human", content: text }] }, { streamResumable: true });
  }

  function answer(decision) {
    stream.submit(undefined, { command: { resume: decision }, streamResumable: true });
  }

  return (
    <main className="chat">
      <header>
        <h1>runq × LangGraph</h1>
        <span className="status" data-testid="status">{stream.isLoading ? "streaming" : "ready"}</span>
      </header>
      <ol className="messages">
        {stream.messages.map((message, index) => (
          <li key={message.id ?? index} className={`message message-${role(message)}`} data-message-id={message.id}>
            <span className="role">{role(message) === "user" ? "You" : "Assistant"}</span>
            <p className="text">{text(message)}</p>
          </li>
        ))}
      </ol>
      {question && !stream.isLoading && (
        <div className="tool tool-approval-requested" role="group" aria-label="Question">
          <p className="text">{question}</p>
          <div className="approval">
            <button type="button" onClick={() => answer("yes")}>Yes</button>
            <button type="button" className="secondary" onClick={() => answer("no")}>No</button>
          </div>
        </div>
      )}
      {stream.error && <p className="error" role="alert">{describeError(stream.error, session.runqUrl)}</p>}
      <form onSubmit={send}>
        <textarea aria-label="Message" rows={2} value={draft} onChange={(e) => setDraft(e.target.value)}
          onKeyDown={(e) => e.key === "Enter" && !e.shiftKey && send(e)} />
        {stream.isLoading
          ? <button type="button" className="secondary" onClick={() => stream.stop()}>Stop</button>
          : <button type="submit">Send</button>}
      </form>
    </main>
  );
}

// Messages arrive as LangChain message objects or as their JSON, by the stream's phase.
function role(message) {
  const type = message.type ?? message._getType?.();
  return type === "human" ? "user" : "assistant";
}

function text(message) {
  if (typeof message.content === "string") return message.content;
  return (message.content ?? []).map((part) => part.text ?? "").join("");
}
