// Dead letters: runs that ended `dead`, with their error codes; admins can requeue them.

import { ApiError } from "../api.js";
import { ago, h, keepFocus, notice, replace, shortId } from "../dom.js";
import { autoRefresh } from "./refresh.js";
import { runLink } from "./runs.js";
import { table } from "./table.js";

const REFRESH_MS = 3000;
const LIMIT = 100;

export function mountDead(view, { api }) {
  const list = h("div");
  const message = h("div");

  async function requeue(run) {
    try {
      await api.requeue(run.id);
      replace(message, notice(`Requeued run ${shortId(run.id)}: it is pending again.`, "ok"));
    } catch (e) {
      replace(message, notice(`Could not requeue ${shortId(run.id)}: ${e.message}`));
    }
    await refresh.now();
  }

  const columns = [
    { label: "Run", cell: runLink },
    api.isAdmin ? { label: "Tenant", cell: (r) => r.tenant_id } : null,
    { label: "Agent", cell: (r) => r.agent },
    { label: "Error code", cell: (r) => h("code", { class: "error-code" }, r.error_code ?? "–") },
    { label: "Message", cell: (r) => h("span", { class: "error-message" }, r.error_message ?? "") },
    { label: "Attempts", cell: (r) => `${r.attempts} / ${r.max_attempts}`, class: "num" },
    { label: "Died", cell: (r) => ago(r.finished_at) },
    api.isAdmin
      ? {
          label: "Action",
          cell: (r) =>
            h("button", { type: "button", class: "button small", "aria-label": `Requeue run ${shortId(r.id)}`, dataset: { focusKey: `requeue-${r.id}` }, onclick: () => requeue(r) }, "Requeue"),
        }
      : null,
  ].filter(Boolean);

  async function load() {
    try {
      const page = await api.listRuns({ status: "dead", limit: LIMIT });
      keepFocus(list, () => replace(list, table(columns, page.items, { caption: "Dead runs, newest first", empty: "No dead runs." })));
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) replace(message, notice(`Could not load dead runs: ${e.message}`));
    }
  }

  view.append(
    h(
      "section",
      { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Dead letters")),
      h("p", { class: "muted lead" }, "Runs that failed for good: a fatal error, or every attempt used up.", api.isAdmin ? " Requeue starts a new execution at attempt 1; the history stays." : ""),
      message,
      list,
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => refresh.stop();
}
