// A run's webhook deliveries, on its run page: status, attempts, the receiver's last answer.

import { ago, h, replace, shortId } from "../dom.js";
import { table } from "./table.js";

const COLUMNS = [
  { label: "Webhook id", cell: (d) => h("code", { title: d.id }, shortId(d.id)) },
  { label: "Event", cell: (d) => `${d.event_type} (seq ${d.event_seq})` },
  { label: "Status", cell: (d) => h("span", { class: `badge delivery-${d.status}` }, d.status) },
  { label: "Attempts", cell: (d) => String(d.attempts), class: "num" },
  { label: "Last answer", cell: (d) => d.last_error ?? (d.last_status_code ? String(d.last_status_code) : "–") },
  { label: "Delivered", cell: (d) => ago(d.delivered_at) },
  { label: "URL", cell: (d) => h("span", { class: "mono" }, d.url) },
];

export function deliveriesPanel(api, runId) {
  const body = h("div");
  const el = h(
    "section",
    { class: "deliveries", "aria-labelledby": "deliveries-title", hidden: true },
    h("div", { class: "section-head" }, h("h2", { id: "deliveries-title" }, "Webhook deliveries")),
    body,
  );
  async function load() {
    try {
      const { items } = await api.deliveries(runId);
      el.hidden = !items.length;
      replace(body, table(COLUMNS, items, { caption: "Webhook deliveries of this run" }));
    } catch {
      el.hidden = true; // the run's own view reports errors; deliveries are secondary
    }
  }
  return { el, load };
}
