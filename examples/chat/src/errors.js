// What went wrong, as a sentence for the person in the chat rather than the raw answer.
// runq answers errors as RFC 9457 problems ({status, code, detail}); the AI SDK hands the
// response's text over as the error's message, and a refused or unreachable fetch as a
// TypeError ("Failed to fetch").

export function describeError(error, runqUrl) {
  const message = String(error?.message ?? error);
  const problem = parseProblem(message);
  if (problem) return `${sentence(problem.detail ?? problem.title ?? "runq refused the request")} (${problem.status} ${problem.code ?? ""})`.replace(" )", ")");
  if (error?.name === "TypeError" || /failed to fetch|networkerror|load failed/i.test(message))
    return `runq could not be reached at ${runqUrl}: is it running, and does its RUNQ_CORS_ORIGINS list ${window.location.origin}? (runq logs the origins it refused)`;
  return sentence(message);
}

function parseProblem(text) {
  const start = text.indexOf("{");
  if (start < 0) return null;
  try {
    const value = JSON.parse(text.slice(start));
    return value && typeof value === "object" && ("detail" in value || "code" in value) ? value : null;
  } catch {
    return null;
  }
}

function sentence(text) {
  const trimmed = String(text).trim();
  if (!trimmed) return "Something went wrong.";
  const capital = trimmed[0].toUpperCase() + trimmed.slice(1);
  return /[.!?]$/.test(capital) ? capital : `${capital}.`;
}
