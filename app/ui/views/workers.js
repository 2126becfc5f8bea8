// Workers and their live leases (admins only). A worker with no lease is idle and not listed.

import { ago, duration, h, notice, replace, shortId } from "../dom.js";
import { autoRefresh } from "./refresh.js";
import { table } from "./table.js";

const REFRESH_MS = 2000;

function leaseLeft(iso) {
  if (!iso) return "–";
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  return seconds >= 0 ? `in ${duration(seconds)}` : h("span", { class: "warn" }, `expired ${duration(-seconds)} ago`);
}

function workerCard(worker) {
  const columns = [
    { label: "Run", cell: (l) => h("a", { href: `#/runs/${l.run_id}`, class: "mono", title: l.run_id }, shortId(l.run_id)) },
    { label: "Tenant", cell: (l) => l.tenant_id },
    { label: "Attempt", cell: (l) => String(l.attempt), class: "num" },
    { label: "Leased for", cell: (l) => duration(l.lease_age_s) },
    { label: "Heartbeat", cell: (l) => ago(l.heartbeat_at) },
    { label: "Lease ends", cell: (l) => leaseLeft(l.locked_until) },
  ];
  return h(
    "article",
    { class: "card worker", "aria-label": `Worker ${worker.worker_id}` },
    h(
      "div",
      { class: "section-head" },
      h("h2", { class: "mono worker-id" }, worker.worker_id),
      h("span", { class: "muted" }, `${worker.leases.length} lease${worker.leases.length === 1 ? "" : "s"} · last heartbeat `, ago(worker.last_heartbeat_at)),
    ),
    table(columns, worker.leases, { caption: `Leases of ${worker.worker_id}` }),
  );
}

export function mountWorkers(view, { api }) {
  const list = h("div", { class: "workers" });
  const message = h("div");

  async function load() {
    try {
      const { items } = await api.workers();
      replace(message);
      replace(list, items.length ? items.map(workerCard) : h("p", { class: "empty" }, "No worker holds a lease right now."));
    } catch (e) {
      replace(message, notice(`Could not load workers: ${e.message}`));
    }
  }

  view.append(
    h(
      "section",
      { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Workers")),
      h("p", { class: "muted lead" }, "Live leases grouped by worker (host:pid:boot id)."),
      message,
      list,
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => refresh.stop();
}
