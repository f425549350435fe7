"use strict";
/* Drawing for tmin explore: matrices from the page data, heatmaps on canvas, a line view and line plots in SVG.
   No libraries: everything the page draws is here. */
const TM = {};

/* {shape, b64} (float32 little-endian) -> {rows, cols, data: Float32Array}. */
TM.decode = function (m) {
  const bin = atob(m.b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const rows = m.shape[0], cols = m.shape.length > 1 ? m.shape[1] : 1;
  return { rows: rows, cols: cols, data: new Float32Array(bytes.buffer) };
};

/* Columns c0..c1-1 of a matrix (a head's slice of Q = X W^Q). */
TM.columns = function (mat, c0, c1) {
  const out = new Float32Array(mat.rows * (c1 - c0));
  for (let r = 0; r < mat.rows; r++)
    for (let c = c0; c < c1; c++) out[r * (c1 - c0) + c - c0] = mat.data[r * mat.cols + c];
  return { rows: mat.rows, cols: c1 - c0, data: out };
};

TM.range = function (mat) {
  let lo = Infinity, hi = -Infinity;
  for (const v of mat.data) { if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } }
  return lo <= hi ? [lo, hi] : [0, 0];
};

/* Probabilities: white -> dark blue on [0, 1]; anything else: blue (< 0) - white - red (> 0); -inf grey. */
TM.color = function (v, scale, probs) {
  if (!Number.isFinite(v)) return "rgb(170,170,170)";
  if (probs) {  /* a "Blues" ramp, linear between five stops */
    const stops = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
    const t = 4 * Math.max(0, Math.min(1, v)), i = Math.min(3, Math.floor(t)), f = t - i;
    const c = [0, 1, 2].map(k => Math.round(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
    return "rgb(" + c.join(",") + ")";
  }
  const t = scale > 0 ? Math.max(-1, Math.min(1, v / scale)) : 0;
  if (t >= 0) return "rgb(255," + Math.round(255 - 180 * t) + "," + Math.round(255 - 200 * t) + ")";
  return "rgb(" + Math.round(255 + 200 * t) + "," + Math.round(255 + 130 * t) + ",255)";
};

/* The shortest decimal that reads back as the same float32: the exact value the server computed. */
TM.fmt = function (v) {
  if (v === -Infinity) return "-inf";
  if (!Number.isFinite(v)) return String(v);
  for (let p = 6; p < 9; p++) { const s = Number(v.toPrecision(p)); if (Math.fround(s) === v) return String(s); }
  return String(Number(v.toPrecision(9)));
};

TM.tip = function (ev, text) {
  const tip = document.getElementById("tip");
  if (!text) { tip.hidden = true; return; }
  tip.textContent = text;
  tip.hidden = false;
  tip.style.left = (ev.clientX + 14) + "px";
  tip.style.top = (ev.clientY + 12) + "px";
};

/* A heatmap: opts {title, mat, rowLabels, colLabels, probs, maxWidth, cellMax, data: {kind, layer, head, step}}.
   Returns a div.hm holding a canvas.heatmap; hovering a cell shows its row, column and exact value. */
TM.heatmap = function (opts) {
  const mat = opts.mat, box = document.createElement("div");
  box.className = "hm" + (opts.small ? " small" : "");
  const [lo, hi] = TM.range(mat);
  const scale = Math.max(Math.abs(lo), Math.abs(hi));
  const labels = !!(opts.rowLabels && opts.colLabels);
  const cell = Math.max(1, Math.min(opts.cellMax || 26, Math.floor((opts.maxWidth || 520) / mat.cols)));
  const showLabels = labels && cell >= 12;
  const left = showLabels ? 8 + 7 * Math.max(...opts.rowLabels.map(s => Math.min(s.length, 10))) : 0;
  const top = showLabels ? 8 + 7 * Math.max(...opts.colLabels.map(s => Math.min(s.length, 10))) : 0;
  const rowH = Math.max(cell, mat.cols > 64 ? 6 : cell);
  const canvas = document.createElement("canvas");
  canvas.className = "heatmap";
  Object.entries(opts.data || {}).forEach(([k, v]) => { canvas.dataset[k] = v; });
  canvas.width = left + cell * mat.cols;
  canvas.height = top + rowH * mat.rows;
  const ctx = canvas.getContext("2d");
  for (let r = 0; r < mat.rows; r++)
    for (let c = 0; c < mat.cols; c++) {
      ctx.fillStyle = TM.color(mat.data[r * mat.cols + c], scale, opts.probs);
      ctx.fillRect(left + c * cell, top + r * rowH, cell, rowH);
    }
  if (showLabels) TM.drawLabels(ctx, opts, left, top, cell, rowH);
  if (opts.highlightRow !== undefined && opts.highlightRow !== null) {
    ctx.strokeStyle = "#1f5fa8"; ctx.lineWidth = 2;
    ctx.strokeRect(left + 1, top + opts.highlightRow * rowH + 1, cell * mat.cols - 2, rowH - 2);
  }
  canvas.addEventListener("mousemove", ev => {
    const rect = canvas.getBoundingClientRect();
    const c = Math.floor((ev.clientX - rect.left - left) / cell), r = Math.floor((ev.clientY - rect.top - top) / rowH);
    if (r < 0 || c < 0 || r >= mat.rows || c >= mat.cols) return TM.tip(ev, "");
    const name = (opts.rowLabels ? " " + opts.rowLabels[r] : "") + (opts.colLabels ? " -> " + opts.colLabels[c] : "");
    TM.tip(ev, opts.title + "[" + r + ", " + c + "]" + name + " = " + TM.fmt(mat.data[r * mat.cols + c]));
  });
  canvas.addEventListener("mouseleave", ev => TM.tip(ev, ""));
  box.innerHTML = '<div class="title"></div><div class="shape"></div>';
  box.querySelector(".title").textContent = opts.title;
  box.querySelector(".shape").textContent = "(" + mat.rows + ", " + mat.cols + ")  " +
    (opts.small ? T("max", { max: hi.toFixed(3) }) : T("range", { min: TM.fmt(lo), max: TM.fmt(hi) }));
  box.appendChild(canvas);
  return box;
};

TM.drawLabels = function (ctx, opts, left, top, cell, rowH) {
  ctx.fillStyle = "#1b1f24"; ctx.font = "11px monospace"; ctx.textBaseline = "middle";
  opts.rowLabels.forEach((s, r) => { ctx.textAlign = "right"; ctx.fillText(s.slice(0, 10), left - 4, top + r * rowH + rowH / 2); });
  opts.colLabels.forEach((s, c) => {
    ctx.save(); ctx.translate(left + c * cell + cell / 2, top - 4); ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left"; ctx.fillText(s.slice(0, 10), 0, 0); ctx.restore();
  });
};

TM.svg = function (tag, attrs, parent) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  Object.entries(attrs || {}).forEach(([k, v]) => el.setAttribute(k, v));
  if (parent) parent.appendChild(el);
  return el;
};

/* bertviz-like: queries on the left, keys on the right, a line per pair with opacity = weight. */
TM.lineView = function (mat, qLabels, kLabels, focusRow) {
  const h = 22, width = 420, n = Math.max(qLabels.length, kLabels.length);
  const svg = TM.svg("svg", { width: width, height: n * h + 30, class: "lineview" });
  const text = (x, y, s, anchor) => { const t = TM.svg("text", { x: x, y: y, "text-anchor": anchor }, svg); t.textContent = s; };
  text(20, 14, T("query"), "start"); text(width - 20, 14, T("key"), "end");
  for (let r = 0; r < mat.rows; r++)
    for (let c = 0; c < mat.cols; c++) {
      const w = mat.data[r * mat.cols + c];
      if (!(w > 0.01) || (focusRow !== null && focusRow !== undefined && r !== focusRow)) continue;
      TM.svg("line", { x1: 130, y1: 30 + r * h, x2: width - 130, y2: 30 + c * h, stroke: "#1f5fa8",
                       "stroke-opacity": Math.min(1, w).toFixed(3), "stroke-width": 2 }, svg);
    }
  qLabels.forEach((s, r) => text(120, 34 + r * h, s, "end"));
  kLabels.forEach((s, c) => text(width - 120, 34 + c * h, s, "start"));
  return svg;
};

/* A line plot: series [{name, points: [[x, y]], color, dash}]; returns an svg.plot. */
TM.plot = function (title, series, yLabel) {
  const W = 440, H = 250, L = 62, R = 12, TOP = 22 + 13 * series.length, B = 34;  /* the legend sits above the axes */
  const pts = series.flatMap(s => s.points);
  const svg = TM.svg("svg", { width: W, height: H, class: "plot" });
  const t = TM.svg("text", { x: L, y: 15, "font-weight": 600 }, svg); t.textContent = title;
  if (!pts.length) return svg;
  const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(...ys, 0), y1 = Math.max(...ys, y0 + 1e-12);
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R), Y = y => H - B - (y - y0) / (y1 - y0) * (H - TOP - B);
  TM.svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888" }, svg);
  TM.svg("line", { x1: L, y1: TOP, x2: L, y2: H - B, stroke: "#888" }, svg);
  [[x0, H - B + 14, L, "start"], [x1, H - B + 14, W - R, "end"]].forEach(([v, y, x, a]) => {
    const e = TM.svg("text", { x: x, y: y, "text-anchor": a }, svg); e.textContent = T("step_n", { step: v }); });
  [y0, y1].forEach(v => { const e = TM.svg("text", { x: L - 4, y: Y(v) + 4, "text-anchor": "end" }, svg); e.textContent = Number(v.toPrecision(3)); });
  const yl = TM.svg("text", { x: 12, y: TOP + (H - TOP - B) / 2, transform: "rotate(-90 12 " + (TOP + (H - TOP - B) / 2) + ")", "text-anchor": "middle" }, svg);
  yl.textContent = yLabel || "";
  series.forEach((s, i) => {
    const d = s.points.map((p, j) => (j ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join("");
    TM.svg("path", { d: d, fill: "none", stroke: s.color, "stroke-width": 1.5, "stroke-dasharray": s.dash || "" }, svg);
    const e = TM.svg("text", { x: W - R, y: 15 + 13 * i, "text-anchor": "end", style: "fill: " + s.color }, svg); e.textContent = s.name;
  });
  return svg;
};
