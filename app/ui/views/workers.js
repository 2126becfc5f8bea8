// Every worker that is up (admins only), idle ones included: its slots in use of its
// concurrency, version and last heartbeat, and its live leases.

import { ago, duration, h, notice, replace, shortId } from "../dom.js";
import { autoRefresh } from "./refresh.js";
import { table } from "./table.js";

const REFRESH_MS = 2000;

function leaseLeft(iso) {
  if (!iso) return "–";
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  return seconds >= 0 ? `in ${duration(seconds)}` : h("span", { class: "warn" }, `expired ${duration(-seconds)} ago`);
}

// A worker without a registry row (an older runq, or one the reaper forgot while it stalled)
// is known only by its leases.
function summary(worker) {
  const registered = worker.slots !== null;
  const slots = registered
    ? h("span", { class: "worker-slots" }, `${worker.slots_in_use}/${worker.slots} slots in use`)
    : h("span", { class: "worker-slots" }, "not registered");
  const version = registered ? ` · runq ${worker.version}` : "";
  return h("span", { class: "muted" }, slots, `${version} · last heartbeat `, ago(worker.last_heartbeat_at));
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
  const idle = worker.leases.length === 0;
  return h(
    "article",
    { class: "card worker", "aria-label": `Worker ${worker.worker_id}`, dataset: { idle: String(idle) } },
    h(
      "div",
      { class: "section-head" },
      h("h2", { class: "mono worker-id" }, worker.worker_id, idle ? h("span", { class: "badge idle" }, "idle") : null),
      summary(worker),
    ),
    idle
      ? h("p", { class: "muted worker-idle" }, "Idle: waiting for work, no lease held.")
      : table(columns, worker.leases, { caption: `Leases of ${worker.worker_id}` }),
  );
}

export function mountWorkers(view, { api }) {
  const list = h("div", { class: "workers" });
  const message = h("div");

  async function load() {
    try {
      const { items } = await api.workers();
      replace(message);
      replace(list, items.length ? items.map(workerCard) : h("p", { class: "empty" }, "No worker is running right now."));
    } catch (e) {
      replace(message, notice(`Could not load workers: ${e.message}`));
    }
  }

  view.append(
    h(
      "section",
      { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Workers")),
      h("p", { class: "muted lead" }, "Every worker that is up (host:pid:boot id), idle or not, with its live leases."),
      message,
      list,
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => refresh.stop();
}
