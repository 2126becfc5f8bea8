// The runs list: live counts by status (also the status filter), a tenant filter for admins,
// newest first, auto-refreshing, and a form that starts a demo run.

import { ApiError } from "../api.js";
import { ago, h, keepFocus, notice, replace, shortId, statusBadge } from "../dom.js";
import { autoRefresh } from "./refresh.js";
import { table } from "./table.js";

export const STATUSES = ["pending", "leased", "waiting", "done", "dead", "cancelled"];
const PAGE = 50;
const MAX_PAGE = 200; // the API's largest page
const COUNT_CAP = 100; // tenants have no stats route: counts past this show as "100+"
const REFRESH_MS = 2000;

export function runLink(run) {
  return h("a", { href: `#/runs/${run.id}`, class: "mono", title: run.id, dataset: { focusKey: run.id } }, shortId(run.id));
}

function hashFor(params) {
  const search = new URLSearchParams(Object.entries(params).filter(([, v]) => v));
  return `#/runs${search.size ? `?${search}` : ""}`;
}

// Counts by status: exact from /admin/stats for all tenants; otherwise one capped page per status.
async function statusCounts(api, tenant) {
  if (api.isAdmin && !tenant) return (await api.stats()).by_status;
  const pages = await Promise.all(STATUSES.map((status) => api.listRuns({ status, tenant, limit: COUNT_CAP })));
  return Object.fromEntries(
    STATUSES.map((status, i) => [status, pages[i].next_cursor ? `${COUNT_CAP}+` : pages[i].items.length]),
  );
}

function newRunForm(api, navigate) {
  const error = h("div");
  const submit = h("button", { type: "submit", class: "button primary" }, "Start run");
  const form = h(
    "form",
    { class: "new-run", "aria-labelledby": "new-run-title" },
    h("h2", { id: "new-run-title" }, "New demo run"),
    h(
      "div",
      { class: "fields" },
      h("label", { class: "field grow" }, h("span", {}, "Prompt"), h("input", { name: "prompt", value: "Plan the release notes for runq 0.2, then check each section.", required: true, maxlength: "2000" })),
      h("label", { class: "field" }, h("span", {}, "Steps"), h("input", { name: "steps", type: "number", min: "0", max: "1000", step: "1", value: "5", required: true })),
      h("label", { class: "field" }, h("span", {}, "Seconds per step"), h("input", { name: "step_s", type: "number", min: "0", max: "3600", step: "0.1", value: "0.5", required: true })),
      submit,
    ),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const input = { prompt: data.get("prompt"), steps: Number(data.get("steps")), step_s: Number(data.get("step_s")) };
    submit.disabled = true;
    try {
      const run = await api.createRun({ agent: "demo", input });
      navigate(`#/runs/${run.id}`);
    } catch (e) {
      replace(error, notice(`Could not start the run: ${e.message}`));
      submit.disabled = false;
    }
  });
  return form;
}

export function mountRuns(view, { api, route, navigate }) {
  const status = route.params.get("status") ?? "";
  const tenant = route.params.get("tenant") ?? "";
  const cursor = route.params.get("cursor") ?? "";
  let limit = PAGE;

  const counts = h("div", { class: "status-filter", role: "group", "aria-label": "Filter by status" });
  const list = h("div", { class: "list", "aria-live": "off" });
  const error = h("div");
  const pager = h("div", { class: "pager" });
  const auto = h("input", { type: "checkbox", id: "auto-refresh", checked: true });

  const tenantForm = api.isAdmin
    ? h(
        "form",
        {
          class: "tenant-filter",
          role: "search",
          onsubmit: (event) => {
            event.preventDefault();
            navigate(hashFor({ status, tenant: new FormData(event.target).get("tenant").trim() }));
          },
        },
        h("label", { for: "tenant-filter" }, "Tenant"),
        h("input", { id: "tenant-filter", name: "tenant", value: tenant, placeholder: "all tenants", autocomplete: "off" }),
        h("button", { type: "submit", class: "button" }, "Filter"),
        tenant ? h("a", { href: hashFor({ status }), class: "button subtle" }, "Clear") : null,
      )
    : null;

  function renderCounts(byStatus) {
    const total = STATUSES.every((s) => typeof byStatus[s] === "number")
      ? STATUSES.reduce((sum, s) => sum + byStatus[s], 0)
      : null;
    const chip = (value, label, count) =>
      h(
        "a",
        {
          href: hashFor({ status: value, tenant }),
          class: `chip ${value ? `status-${value}` : ""}`,
          "aria-current": status === value ? "true" : null,
          dataset: { status: value || "all", focusKey: `chip-${value}` },
        },
        h("span", { class: "chip-label" }, label),
        h("span", { class: "chip-count" }, String(count ?? "–")),
      );
    keepFocus(counts, () => replace(counts, chip("", "all", total), STATUSES.map((s) => chip(s, s, byStatus[s]))));
  }

  function renderRuns(page) {
    const columns = [
      { label: "Run", cell: runLink },
      api.isAdmin ? { label: "Tenant", cell: (r) => r.tenant_id } : null,
      { label: "Agent", cell: (r) => r.agent },
      { label: "Status", cell: (r) => statusBadge(r.status) },
      { label: "Attempts", cell: (r) => `${r.attempts} / ${r.max_attempts}`, class: "num" },
      { label: "Created", cell: (r) => ago(r.created_at) },
      { label: "Finished", cell: (r) => ago(r.finished_at) },
      // A done run may keep the code of a failed attempt; only dead and retrying runs show theirs.
      { label: "Error", cell: (r) => (r.error_code && ["dead", "pending"].includes(r.status) ? h("code", {}, r.error_code) : "") },
    ].filter(Boolean);
    const empty = status ? `No ${status} runs.` : "No runs yet: start a demo run above.";
    keepFocus(list, () => replace(list, table(columns, page.items, { caption: "Runs, newest first", empty })));
    const older = page.next_cursor && limit >= MAX_PAGE;
    replace(
      pager,
      cursor ? h("a", { class: "button", href: hashFor({ status, tenant }) }, "← Newest") : null,
      page.next_cursor && !older
        ? h("button", { type: "button", class: "button", onclick: () => { limit = Math.min(MAX_PAGE, limit + PAGE); refresh.now(); } }, "Show more")
        : null,
      older ? h("a", { class: "button", href: hashFor({ status, tenant, cursor: page.next_cursor }) }, "Older runs →") : null,
    );
  }

  async function load() {
    try {
      const [byStatus, page] = await Promise.all([
        statusCounts(api, tenant),
        api.listRuns({ status, tenant, cursor, limit }),
      ]);
      renderCounts(byStatus);
      renderRuns(page);
      replace(error);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) replace(error, notice(`Could not load runs: ${e.message}`));
    }
  }

  view.append(
    h(
      "section",
      { class: "page" },
      h(
        "div",
        { class: "page-head" },
        h("h1", {}, "Runs"),
        h("label", { class: "toggle", for: "auto-refresh" }, auto, "Auto-refresh"),
      ),
      newRunForm(api, navigate),
      counts,
      tenantForm,
      error,
      list,
      pager,
    ),
  );
  const refresh = autoRefresh(load, REFRESH_MS);
  auto.addEventListener("change", () => refresh.setEnabled(auto.checked));
  return () => refresh.stop();
}
