// A data table whose rows turn into labelled cards on narrow screens (see style.css).

import { h } from "../dom.js";

// columns: [{label, cell: (row) => Node | string, class?}]
export function table(columns, rows, { caption, empty = "Nothing here yet." } = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "data" },
      caption ? h("caption", { class: "visually-hidden" }, caption) : null,
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.class }, c.label)))),
      h(
        "tbody",
        {},
        rows.map((row) =>
          h("tr", { dataset: row.id ? { id: row.id } : {} }, columns.map((c) => h("td", { "data-label": c.label, class: c.class }, c.cell(row)))),
        ),
      ),
    ),
  );
}
