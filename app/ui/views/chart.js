// Small inline SVG charts of the last hour (no library: the UI has no build step). Each chart is
// a <figure> whose SVG has role="img" and a label saying what the last point is, so the figure
// reads in words as well as in lines.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 320;
const HEIGHT = 90;
const PAD = 4;

function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  return el;
}

// One line per series over the samples' times (x: the last hour, y: 0 to the largest value).
// series: [{ key, label, className }]; samples: [{ at, [key]: number }].
export function lineChart(title, samples, series, { bars = false } = {}) {
  const figure = document.createElement("figure");
  figure.className = "chart";
  figure.dataset.chart = title;
  const caption = document.createElement("figcaption");
  caption.textContent = title;
  const end = Date.now();
  const start = end - 3600 * 1000;
  const max = Math.max(1, ...samples.flatMap((s) => series.map((d) => s[d.key])));
  const x = (at) => PAD + ((Date.parse(at) - start) / (end - start)) * (WIDTH - 2 * PAD);
  const y = (v) => HEIGHT - PAD - (v / max) * (HEIGHT - 2 * PAD);
  const last = samples.at(-1);
  const summary = last
    ? series.map((d) => `${d.label} ${last[d.key]}`).join(", ") + ` (peak ${max} in the last hour)`
    : "no samples yet";
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": `${title}: ${summary}` });
  chart.append(svg("line", { x1: PAD, x2: WIDTH - PAD, y1: HEIGHT - PAD, y2: HEIGHT - PAD, class: "chart-axis" }));
  for (const d of series) {
    if (bars) {
      for (const s of samples) {
        const top = y(s[d.key]);
        chart.append(svg("rect", { x: x(s.at) - 2, y: top, width: 4, height: HEIGHT - PAD - top, class: d.className }));
      }
    } else if (samples.length) {
      const points = samples.map((s) => `${x(s.at).toFixed(1)},${y(s[d.key]).toFixed(1)}`).join(" ");
      chart.append(svg("polyline", { points, fill: "none", class: d.className }));
      // the latest value as a dot: a single sample (the first minute) is a point, not a line
      chart.append(svg("circle", { cx: x(last.at), cy: y(last[d.key]), r: 3, class: `${d.className} chart-dot` }));
    }
  }
  const legend = document.createElement("div");
  legend.className = "chart-legend muted";
  legend.textContent = summary;
  figure.append(caption, chart, legend);
  return figure;
}
