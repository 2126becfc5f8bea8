// The key's tenant's threads (conversations), newest first.

import { ago, h, notice, replace, shortId, statusBadge } from "../dom.js";
import { autoRefresh } from "./refresh.js";
import { table } from "./table.js";

const REFRESH_MS = 5000;

const COLUMNS = [
  { label: "Thread", cell: (t) => h("a", { href: `#/threads/${t.id}`, class: "mono", title: t.id }, shortId(t.id)) },
  { label: "Status", cell: (t) => statusBadge(t.status) },
  { label: "Messages", cell: (t) => String(t.message_count) },
  { label: "Last run", cell: (t) => (t.last_run_id ? h("a", { href: `#/runs/${t.last_run_id}`, class: "mono", title: t.last_run_id }, shortId(t.last_run_id)) : "–") },
  { label: "Updated", cell: (t) => ago(t.updated_at) },
  { label: "Created", cell: (t) => ago(t.created_at) },
];

export function mountThreads(view, { api }) {
  const list = h("div");
  const message = h("div");

  async function load() {
    try {
      const { items } = await api.threads();
      replace(message);
      replace(list, table(COLUMNS, items, { caption: "Threads", empty: "No threads yet." }));
    } catch (e) {
      replace(message, notice(`Could not load threads: ${e.message}`));
    }
  }

  view.append(
    h(
      "section",
      { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Threads")),
      h("p", { class: "muted lead" }, "Conversations: their runs execute one at a time, in the order they were sent."),
      message,
      h("div", { class: "card" }, list),
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => refresh.stop();
}
