// Simple charts as inline SVG, built with DOM calls (no library, no network, no markup strings): a stacked
// column chart over time and horizontal bars. Every label is a text node; every chart has a <title> and an
// aria-label saying what it shows, and each bar a <title> with its figures, so the numbers are one hover away.

const NS = "http://www.w3.org/2000/svg";
// Distinguishable in light and dark themes; tenants keep their colour across charts (by their order).
export const PALETTE = ["#1f6feb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626",
  "#4b5563", "#a16207"];

export function s(tag, attrs = {}, ...children) {
  const element = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) element.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

function frame(width, height, label) {
  return s("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": label,
    class: "chart", preserveAspectRatio: "xMinYMin meet" }, s("title", {}, label));
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

// Columns over time, one stacked segment per series: `columns` are labels, `series` [{name, values: [number]}].
export function stackedColumns({ label, columns, series, format, colors = PALETTE, width = 900, height = 260 }) {
  const left = 64, bottom = 36, top = 12, right = 8;
  const plotW = width - left - right, plotH = height - top - bottom;
  const totals = columns.map((_c, i) => series.reduce((sum, one) => sum + (one.values[i] || 0), 0));
  const max = niceMax(Math.max(0, ...totals));
  const svg = frame(width, height, label);
  for (let tick = 0; tick <= 4; tick++) {
    const value = (max * tick) / 4;
    const y = top + plotH - (plotH * tick) / 4;
    svg.append(s("line", { x1: left, x2: width - right, y1: y, y2: y, class: "grid" }),
      s("text", { x: left - 6, y: y + 4, "text-anchor": "end", class: "axis" }, format(value)));
  }
  const slot = plotW / Math.max(1, columns.length);
  const barW = Math.max(1, slot * 0.8);
  const every = Math.max(1, Math.ceil(columns.length / 10));
  columns.forEach((column, i) => {
    let y = top + plotH;
    const x = left + i * slot + (slot - barW) / 2;
    series.forEach((one, k) => {
      const value = one.values[i] || 0;
      if (value <= 0) return;
      const h = (plotH * value) / max;
      y -= h;
      svg.append(s("rect", { x, y, width: barW, height: h, fill: colors[k % colors.length], class: "bar",
        "data-series": one.name, "data-column": i }, s("title", {}, `${one.name}, ${column}: ${format(value)}`)));
    });
    if (i % every === 0) {
      svg.append(s("text", { x: x + barW / 2, y: height - bottom + 16, "text-anchor": "middle", class: "axis" },
        column));
    }
  });
  return svg;
}

// Horizontal bars, one row each: rows [{name, value, note, parts: [{value, cls, name}]}]; parts stack inside a row.
export function horizontalBars({ label, rows, format, width = 900, rowHeight = 24, labelWidth = 260 }) {
  const height = Math.max(1, rows.length) * rowHeight + 8;
  const plotW = width - labelWidth - 140;
  const max = niceMax(Math.max(0, ...rows.map((row) => row.total ?? row.value)));
  const svg = frame(width, height, label);
  rows.forEach((row, i) => {
    const y = 4 + i * rowHeight;
    const name = row.name.length > 40 ? `${row.name.slice(0, 39)}…` : row.name;
    svg.append(s("text", { x: labelWidth - 8, y: y + rowHeight * 0.65, "text-anchor": "end", class: "label" }, name));
    let x = labelWidth;
    const parts = row.parts || [{ value: row.value, cls: "bar-main", name: row.name }];
    for (const part of parts) {
      const w = (plotW * Math.max(0, part.value)) / max;
      svg.append(s("rect", { x, y: y + 3, width: w, height: rowHeight - 8, class: `bar ${part.cls}`,
        "data-row": row.name }, s("title", {}, `${row.name}: ${part.name} ${format(part.value)}`)));
      x += w;
    }
    svg.append(s("text", { x: x + 6, y: y + rowHeight * 0.65, class: "value" },
      row.note ?? format(row.total ?? row.value)));
  });
  return svg;
}
