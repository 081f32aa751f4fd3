// Line and stacked charts of range-query results, drawn by the vendored uPlot
// (window.uPlot, loaded by the page shell). uPlot's legend is DOM text: each series' label
// set is readable page text, a click on it hides or shows the series, and it shows the values
// under the cursor.

import {el, formatHuman, formatSeries} from './util.js';

const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
  '#7f7f7f', '#bcbd22', '#17becf', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173'];

/** The colour of series i. */
export function color(i) {
  return PALETTE[i % PALETTE.length];
}

/**
 * Turns a matrix (the API's `result`) over [startS, endS] with `stepS` into uPlot's columns:
 * one x column of every step, one y column per series (null where the series has no sample).
 */
export function align(result, startS, endS, stepS) {
  const xs = [];
  for (let t = startS; t <= endS + 1e-9; t += stepS) xs.push(Math.round(t * 1000) / 1000);
  const index = new Map(xs.map((t, i) => [t, i]));
  const cols = result.map((s) => {
    const col = new Array(xs.length).fill(null);
    for (const [t, v] of s.values || []) {
      const i = index.get(Math.round(t * 1000) / 1000);
      if (i !== undefined) col[i] = Number(v);
    }
    return col;
  });
  return {xs, cols};
}

/** A series' legend text: its labels (without __name__ when `dropName`), or the name alone. */
export function legendText(metric, dropName) {
  const m = Object.assign({}, metric);
  if (dropName) delete m.__name__;
  const keys = Object.keys(m);
  if (keys.length === 0) return metric.__name__ || '{}';
  return formatSeries(m);
}

/**
 * Draws `result` (a matrix) into `host`; returns the uPlot instance (or null when empty).
 * opts: {start, end, step (seconds), stacked, unit, height, legend (fn metric -> text),
 * style (fn (metric, i) -> {stroke, dash}), marks (time spans shaded, see drawMarks)}.
 */
export function drawChart(host, result, opts) {
  host.replaceChildren();
  if (!result.length) return null;
  const {xs, cols} = align(result, opts.start, opts.end, opts.step);
  let data = cols;
  if (opts.stacked) {
    const acc = new Array(xs.length).fill(0);
    data = cols.map((c) => c.map((v, i) => (v === null ? null : (acc[i] += v))));
  }
  const legend = opts.legend || ((m) => legendText(m, true));
  const style = opts.style || ((m, i) => ({stroke: color(i)}));
  const series = [{label: 'time'}].concat(result.map((s, i) => ({
    label: legend(s.metric),
    stroke: style(s.metric, i).stroke,
    dash: style(s.metric, i).dash,
    width: 1.5,
    fill: opts.stacked ? color(i) + '55' : undefined,
    spanGaps: false,
    value: (u, v, si, idx) => (idx === null || idx === undefined ? '–' : formatHuman(cols[si - 1][idx], opts.unit)),
  })));
  const width = Math.max(300, host.clientWidth || host.parentElement.clientWidth || 800);
  const u = new window.uPlot({
    width,
    height: opts.height || 300,
    series,
    scales: {x: {time: true}},
    axes: [
      {},
      {size: 70, values: (u, vals) => vals.map((v) => formatHuman(v, opts.unit))},
    ],
    legend: {live: true},
    // stacked: each series' area fills down to the one below it, not to zero
    bands: opts.stacked ? result.slice(1).map((_, i) => ({series: [i + 2, i + 1]})) : [],
    cursor: {drag: {x: true, y: false}},
    hooks: Object.assign({drawAxes: [drawMarks]}, opts.onZoom ? {setSelect: [(u) => {
      if (u.select.width > 2) {
        const a = u.posToVal(u.select.left, 'x');
        const b = u.posToVal(u.select.left + u.select.width, 'x');
        opts.onZoom(a, b);
      }
    }]} : {}),
  }, [xs].concat(data), host);
  u.marks = opts.marks || [];
  const ro = new ResizeObserver(() => {
    const w = host.clientWidth;
    if (w > 0 && Math.abs(w - u.width) > 4) u.setSize({width: w, height: u.height});
  });
  ro.observe(host);
  host.dataset.series = String(result.length);
  return u;
}

/**
 * Shades the time spans of `u.marks` ([{start, end (Unix seconds), color}]) behind the
 * series; a span shorter than 2 pixels shows as a 2-pixel line.
 */
function drawMarks(u) {
  if (!u.marks || !u.marks.length) return;
  const {left, top, width, height} = u.bbox;
  const ctx = u.ctx;
  ctx.save();
  for (const m of u.marks) {
    let x0 = Math.max(left, u.valToPos(m.start, 'x', true));
    let x1 = Math.min(left + width, u.valToPos(m.end, 'x', true));
    if (x1 < left || x0 > left + width) continue;
    if (x1 - x0 < 2) x1 = x0 + 2;
    ctx.fillStyle = m.color;
    ctx.fillRect(x0, top, x1 - x0, height);
  }
  ctx.restore();
}

/** Replaces the shaded spans of chart `u` (see drawMarks) and redraws it. */
export function setMarks(u, marks) {
  u.marks = marks;
  u.redraw(false, false);
}

/** A short note in place of a chart. */
export function emptyChart(host, text) {
  host.replaceChildren(el('div', {class: 'empty'}, text));
  host.dataset.series = '0';
}
