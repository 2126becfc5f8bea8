// Schedules with their next run: the key's tenant's, or every tenant's for admins.

import { ago, h, notice, replace, shortId } from "../dom.js";
import { autoRefresh } from "./refresh.js";
import { table } from "./table.js";

const REFRESH_MS = 5000;

function timing(s) {
  return s.cron ? h("span", {}, h("code", {}, s.cron), s.timezone === "UTC" ? " UTC" : ` ${s.timezone}`) : `every ${s.every_s} s`;
}

function nextRun(s) {
  if (s.paused) return h("span", { class: "muted" }, "paused");
  // parked: the workers could not fire it, and try again a minute after error_at
  if (s.error) return h("span", { title: `since ${new Date(s.error_at).toLocaleString()}` }, `parked: ${s.error}`);
  return h("time", { datetime: s.next_run_at, title: new Date(s.next_run_at).toLocaleString() }, new Date(s.next_run_at).toLocaleString());
}

const COLUMNS = [
  { label: "Schedule", cell: (s) => h("code", { title: s.id }, shortId(s.id)) },
  { label: "Tenant", cell: (s) => s.tenant_id },
  { label: "Agent", cell: (s) => s.agent },
  { label: "When", cell: timing },
  { label: "Next run", cell: nextRun },
  { label: "Last run", cell: (s) => (s.last_run_id ? h("a", { href: `#/runs/${s.last_run_id}`, class: "mono", title: s.last_run_id }, shortId(s.last_run_id)) : "–") },
  { label: "Created", cell: (s) => ago(s.created_at) },
];

export function mountSchedules(view, { api }) {
  const list = h("div");
  const message = h("div");

  async function load() {
    try {
      const { items } = await api.schedules();
      replace(message);
      replace(list, table(COLUMNS, items, { caption: "Schedules", empty: "No schedules yet." }));
    } catch (e) {
      replace(message, notice(`Could not load schedules: ${e.message}`));
    }
  }

  view.append(
    h(
      "section",
      { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Schedules")),
      h("p", { class: "muted lead" }, "Recurring runs: one run per slot, created by the workers."),
      message,
      h("div", { class: "card" }, list),
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => refresh.stop();
}
