// Building DOM from data without innerHTML, so nothing a run emits can become markup.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name in el && typeof value !== "string") el[name] = value;
    else el.setAttribute(name, value === true ? "" : value);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.max(0, seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.round((s % 86400) / 3600)} h`;
}

// A <time> showing "12 s ago", with the exact timestamp as its title and datetime.
export function ago(iso) {
  if (!iso) return h("span", { class: "muted" }, "–");
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  const text = seconds < 1 ? "just now" : `${duration(seconds)} ago`;
  return h("time", { datetime: iso, title: new Date(iso).toLocaleString() }, text);
}

export function shortId(id) {
  return id.slice(0, 8);
}

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, status);
}

export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

// A status line for errors and confirmations, announced to screen readers.
export function notice(text, kind = "error") {
  return h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

// Re-render `container` without losing keyboard focus: an element with the same data-focus-key
// in the new content gets the focus back.
export function keepFocus(container, render) {
  const key = container.contains(document.activeElement) ? document.activeElement.dataset?.focusKey : undefined;
  render();
  if (key) container.querySelector(`[data-focus-key="${CSS.escape(key)}"]`)?.focus();
}
