// Queue stats (admins only): depth by status, oldest pending age, recent dead, in-flight per
// tenant, the last hour as charts (queue depth, runs finished a minute), tokens per tenant (24 h),
// and each tenant's use against its limits (docs/limits.md).

import { duration, h, notice, replace } from "../dom.js";
import { STATUSES } from "./runs.js";
import { lineChart } from "./chart.js";
import { autoRefresh } from "./refresh.js";
import { table } from "./table.js";

const REFRESH_MS = 2000;

function tile(label, value, { status, hint } = {}) {
  return h(
    "div",
    { class: `tile ${status ? `status-${status}` : ""}`, dataset: { stat: status ?? label } },
    h("span", { class: "tile-label" }, label),
    h("span", { class: "tile-value" }, value),
    hint ? h("span", { class: "tile-hint muted" }, hint) : null,
  );
}

// "used / limit", or the use alone when the tenant has no such limit (0).
function against(used, limit) {
  return limit ? `${used} / ${limit}` : String(used);
}

function limitsTable(tenants) {
  const rate = (t) =>
    t.effective.create_per_s
      ? `${t.effective.create_per_s}/s, burst ${t.effective.create_burst} (${Math.floor(t.use.create_tokens ?? 0)} left)`
      : "–";
  return table(
    [
      { label: "Tenant", cell: (t) => h("a", { href: `#/runs?tenant=${encodeURIComponent(t.tenant_id)}` }, t.tenant_id) },
      { label: "Pending", cell: (t) => against(t.use.pending, t.effective.max_pending), class: "num" },
      { label: "In flight", cell: (t) => against(t.use.inflight, t.effective.max_inflight), class: "num" },
      { label: "Streams", cell: (t) => against(t.use.streams, t.effective.max_streams), class: "num" },
      { label: "Schedules", cell: (t) => against(t.use.schedules, t.effective.max_schedules), class: "num" },
      { label: "Create rate", cell: rate },
    ],
    tenants,
    { caption: "Use against limits per tenant", empty: "No tenant yet." },
  );
}

export function mountStats(view, { api }) {
  const tiles = h("div", { class: "tiles", role: "group", "aria-label": "Runs by status" });
  const health = h("div", { class: "tiles" });
  const tenants = h("div");
  const charts = h("div", { class: "charts" });
  const usage = h("div");
  const limits = h("div");
  const message = h("div");

  async function load() {
    try {
      const [stats, tenantPage] = await Promise.all([api.stats(), api.tenants()]);
      replace(message);
      replace(
        tiles,
        STATUSES.map((s) =>
          h("a", { href: `#/runs?status=${s}`, class: "tile-link" }, tile(s, String(stats.by_status[s] ?? 0), { status: s })),
        ),
      );
      replace(
        health,
        tile("Oldest pending", stats.by_status.pending ? duration(stats.oldest_pending_age_s) : "–", { hint: "waiting to be claimed" }),
        tile("Dead in the last hour", String(stats.dead_last_hour), { hint: "see Dead letters" }),
      );
      const rows = Object.entries(stats.inflight_by_tenant)
        .sort((a, b) => b[1] - a[1])
        .map(([tenant, n]) => ({ tenant, n }));
      replace(
        tenants,
        table(
          [
            { label: "Tenant", cell: (r) => h("a", { href: `#/runs?tenant=${encodeURIComponent(r.tenant)}` }, r.tenant) },
            { label: "In flight", cell: (r) => String(r.n), class: "num" },
          ],
          rows,
          { caption: "In-flight runs per tenant", empty: "No run is in flight." },
        ),
      );
      replace(
        charts,
        lineChart("Queue depth", stats.last_hour, [
          { key: "pending", label: "pending", className: "chart-pending" },
          { key: "leased", label: "leased", className: "chart-leased" },
        ]),
        lineChart("Runs finished per minute", stats.last_hour, [
          { key: "finished", label: "finished", className: "chart-finished" },
        ], { bars: true }),
      );
      const n = (x) => x.toLocaleString("en-US");
      const used = Object.entries(stats.usage_last_24h)
        .map(([tenant, u]) => ({ tenant, ...u, tokens: u.input_tokens + u.output_tokens }))
        .sort((a, b) => b.tokens - a.tokens);
      replace(
        usage,
        table(
          [
            { label: "Tenant", cell: (r) => h("a", { href: `#/runs?tenant=${encodeURIComponent(r.tenant)}` }, r.tenant) },
            { label: "Tokens", cell: (r) => n(r.tokens), class: "num" },
            { label: "Input", cell: (r) => n(r.input_tokens), class: "num" },
            { label: "Output", cell: (r) => n(r.output_tokens), class: "num" },
            { label: "Model calls", cell: (r) => n(r.model_calls), class: "num" },
            { label: "Tool calls", cell: (r) => n(r.tool_calls), class: "num" },
          ],
          used,
          { caption: "Usage per tenant in the last 24 hours", empty: "No tokens used in the last 24 hours." },
        ),
      );
      replace(limits, limitsTable(tenantPage.items));
    } catch (e) {
      replace(message, notice(`Could not load stats: ${e.message}`));
    }
  }

  view.append(
    h(
      "section",
      { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Queue stats")),
      message,
      h("h2", { class: "section-title" }, "Depth by status"),
      tiles,
      h("h2", { class: "section-title" }, "Health"),
      health,
      h("h2", { class: "section-title" }, "The last hour"),
      charts,
      h("h2", { class: "section-title" }, "In flight per tenant"),
      tenants,
      h("h2", { class: "section-title" }, "Tokens per tenant, last 24 h"),
      usage,
      h("h2", { class: "section-title" }, "Limits per tenant"),
      limits,
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  return () => refresh.stop();
}
