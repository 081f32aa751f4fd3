// The query page: panels with an expression editor (autocomplete from the API), a table, a
// graph and an explain tab (the expression's tree, each node evaluated: explain.js). The
// panels live in the URL in Prometheus 3's parameters (g0.expr, g0.tab, g0.range_input, ...),
// and Prometheus 2's forms (g0.tab=0|1, g0.stacked, g0.step_input) are read too, so links
// from either keep working.

import {el, api, ApiError, parseDuration, formatDuration, formatSeries, formatTime, parseTime, notice, heading} from './util.js';
import {drawChart, emptyChart} from './chart.js';
import {renderTree} from './explain.js';

// PromQL's functions, aggregations and keywords, for autocomplete.
const FUNCTIONS = ['abs', 'absent', 'absent_over_time', 'acos', 'acosh', 'asin', 'asinh', 'atan',
  'atanh', 'avg_over_time', 'ceil', 'changes', 'clamp', 'clamp_max', 'clamp_min', 'cos', 'cosh',
  'count_over_time', 'day_of_month', 'day_of_week', 'day_of_year', 'days_in_month', 'deg', 'delta',
  'deriv', 'exp', 'floor', 'histogram_avg', 'histogram_count', 'histogram_fraction',
  'histogram_quantile', 'histogram_stddev', 'histogram_stdvar', 'histogram_sum', 'hour', 'idelta',
  'increase', 'irate', 'label_join', 'label_replace', 'last_over_time', 'ln', 'log10', 'log2',
  'mad_over_time', 'max_over_time', 'min_over_time', 'minute', 'month', 'pi', 'predict_linear',
  'present_over_time', 'quantile_over_time', 'rad', 'rate', 'resets', 'round', 'scalar', 'sgn',
  'sin', 'sinh', 'sort', 'sort_by_label', 'sort_by_label_desc', 'sort_desc', 'sqrt',
  'stddev_over_time', 'stdvar_over_time', 'sum_over_time', 'tan', 'tanh', 'time', 'timestamp',
  'vector', 'year'];
const AGGREGATIONS = ['sum', 'avg', 'min', 'max', 'count', 'group', 'stddev', 'stdvar', 'topk',
  'bottomk', 'quantile', 'count_values', 'limitk', 'limit_ratio'];
const KEYWORDS = ['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'offset', 'bool',
  'and', 'or', 'unless', 'atan2'];

const DENSITY_POINTS = {low: 100, medium: 250, high: 750};

/** A panel's state with Prometheus 3's defaults. */
function defaultPanel() {
  return {expr: '', tab: 'table', range: 3600, end: null, moment: null, resType: 'auto',
    resDensity: 'medium', resStep: null, displayMode: 'lines'};
}

/** Reads the panels from a query string, in Prometheus 3's or 2's parameters. */
export function readPanels(search) {
  const p = new URLSearchParams(search);
  const idx = new Set();
  for (const k of p.keys()) {
    const m = /^g(\d+)\./.exec(k);
    if (m) idx.add(Number(m[1]));
  }
  return [...idx].sort((a, b) => a - b).map((i) => {
    const g = (n) => p.get(`g${i}.${n}`);
    const s = defaultPanel();
    s.expr = g('expr') || '';
    const tab = g('tab');
    if (tab === 'graph' || tab === '0') s.tab = 'graph';
    else if (tab === 'explain') s.tab = 'explain';
    else s.tab = 'table';
    const range = parseDuration(g('range_input'));
    if (range > 0) s.range = range;
    s.end = parseTime(g('end_input'));
    s.moment = parseTime(g('moment_input'));
    const rt = g('res_type');
    const step = parseDuration(g('res_step'));
    const oldStep = parseDuration(g('step_input'));
    if ((rt === 'fixed' || rt === 'custom') && step > 0) {
      s.resType = rt;
      s.resStep = step;
    } else if (oldStep > 0) {
      s.resType = 'custom';
      s.resStep = oldStep;
    }
    if (['low', 'medium', 'high'].includes(g('res_density'))) s.resDensity = g('res_density');
    if (g('display_mode') === 'stacked' || g('stacked') === '1') s.displayMode = 'stacked';
    return s;
  });
}

/** Writes the panels as Prometheus 3 does. */
export function writePanels(panels) {
  const p = new URLSearchParams();
  panels.forEach((s, i) => {
    const k = (n, v) => p.set(`g${i}.${n}`, v);
    k('expr', s.expr);
    k('show_tree', '0');
    k('tab', s.tab);
    k('range_input', formatDuration(s.range));
    if (s.end !== null) k('end_input', formatTime(s.end));
    if (s.moment !== null) k('moment_input', formatTime(s.moment));
    k('res_type', s.resType);
    if (s.resType === 'auto') k('res_density', s.resDensity);
    else k('res_step', String(s.resStep));
    k('display_mode', s.displayMode);
  });
  return p.toString();
}

/** The step of a graph over `range` seconds. */
export function stepFor(s) {
  if (s.resType !== 'auto' && s.resStep > 0) return s.resStep;
  return Math.max(1, Math.ceil(s.range / DENSITY_POINTS[s.resDensity || 'medium']));
}

// ---- autocomplete ----------------------------------------------------------------------------

const cache = new Map();
function cached(key, load) {
  if (!cache.has(key)) cache.set(key, load().catch(() => []));
  return cache.get(key);
}
const metricNames = () => cached('names', async () => (await api('api/v1/label/__name__/values')).data);
const labelNames = (metric) => cached('ln:' + metric, async () =>
  (await api('api/v1/labels', metric ? {'match[]': metric} : {})).data.filter((n) => n !== '__name__'));
const labelValues = (metric, label) => cached(`lv:${metric}:${label}`, async () =>
  (await api(`api/v1/label/${encodeURIComponent(label)}/values`, metric ? {'match[]': metric} : {})).data);

/** What to complete at the end of `text` (the expression up to the cursor). */
export function completionContext(text) {
  // inside a string: a label value after `label=` / `label=~` ... in braces
  const val = /([a-zA-Z_:][\w:]*)?\{[^{}]*?([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)$/.exec(text);
  if (val) return {kind: 'value', metric: val[1] || '', label: val[2], word: val[4]};
  const brace = /([a-zA-Z_:][\w:]*)?\{([^{}]*)$/.exec(text);
  if (brace) {
    const w = /([a-zA-Z_]\w*)?$/.exec(brace[2]);
    return {kind: 'label', metric: brace[1] || '', word: w[1] || ''};
  }
  const grouping = /\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)$/.exec(text);
  if (grouping) {
    const w = /([a-zA-Z_]\w*)?$/.exec(grouping[2]);
    return {kind: 'label', metric: '', word: w[1] || ''};
  }
  const word = /([a-zA-Z_:][\w:]*)$/.exec(text);
  return {kind: 'name', word: word ? word[1] : ''};
}

function rank(items, word, limit) {
  const w = word.toLowerCase();
  const pre = [];
  const sub = [];
  for (const it of items) {
    const t = it.text.toLowerCase();
    if (t === w) continue;
    if (t.startsWith(w)) pre.push(it);
    else if (w && t.includes(w)) sub.push(it);
  }
  return pre.concat(sub).slice(0, limit);
}

async function suggestions(ctx) {
  if (ctx.kind === 'value') {
    return rank((await labelValues(ctx.metric, ctx.label)).map((v) => ({text: v, type: 'label value'})), ctx.word, 50);
  }
  if (ctx.kind === 'label') {
    return rank((await labelNames(ctx.metric)).map((v) => ({text: v, type: 'label name'})), ctx.word, 50);
  }
  if (!ctx.word) return [];
  const names = (await metricNames()).map((v) => ({text: v, type: 'metric'}));
  const fns = FUNCTIONS.map((f) => ({text: f, type: 'function'}))
    .concat(AGGREGATIONS.map((f) => ({text: f, type: 'aggregation'})))
    .concat(KEYWORDS.map((f) => ({text: f, type: 'keyword'})));
  return rank(fns.concat(names), ctx.word, 50);
}

/** Autocomplete on a textarea; `onRun` is called on Enter when no suggestion is open. */
function attachAutocomplete(input, box, onRun) {
  let items = [];
  let sel = 0;
  let seq = 0;
  const close = () => {
    items = [];
    box.replaceChildren();
    box.hidden = true;
  };
  const show = () => {
    box.replaceChildren(...items.map((it, i) => el('li', {
      class: i === sel ? 'selected' : '', role: 'option', 'data-type': it.type,
      onmousedown: (e) => { e.preventDefault(); sel = i; accept(); },
    }, el('span', {class: 'ac-text'}, it.text), el('span', {class: 'ac-type'}, it.type))));
    box.hidden = items.length === 0;
  };
  const accept = () => {
    const it = items[sel];
    if (!it) return;
    const pos = input.selectionStart;
    const before = input.value.slice(0, pos);
    const ctx = completionContext(before);
    const start = pos - ctx.word.length;
    let ins = it.text;
    if (it.type === 'function' || it.type === 'aggregation') ins += '(';
    if (it.type === 'label value') ins += '"';
    input.value = input.value.slice(0, start) + ins + input.value.slice(pos);
    const c = start + ins.length;
    input.setSelectionRange(c, c);
    close();
    input.dispatchEvent(new Event('input'));
  };
  input.addEventListener('input', async () => {
    const my = ++seq;
    const ctx = completionContext(input.value.slice(0, input.selectionStart));
    const found = await suggestions(ctx);
    if (my !== seq) return;
    items = found;
    sel = 0;
    show();
  });
  input.addEventListener('keydown', (e) => {
    if (!box.hidden && items.length) {
      if (e.key === 'ArrowDown') { sel = (sel + 1) % items.length; show(); e.preventDefault(); return; }
      if (e.key === 'ArrowUp') { sel = (sel + items.length - 1) % items.length; show(); e.preventDefault(); return; }
      if (e.key === 'Enter' || e.key === 'Tab') { accept(); e.preventDefault(); return; }
      if (e.key === 'Escape') { close(); e.preventDefault(); return; }
    }
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      onRun();
    }
  });
  input.addEventListener('blur', () => setTimeout(close, 150));
}

// ---- panels ----------------------------------------------------------------------------------

function showMessages(box, env) {
  for (const w of env.warnings || []) box.append(notice('warning', 'Warning: ' + w));
  for (const w of env.infos || []) box.append(notice('info', 'Info: ' + w));
}

function renderTable(out, data) {
  const {resultType, result} = data;
  if (resultType === 'scalar' || resultType === 'string') {
    out.append(el('table', {class: 'grid result'}, el('tbody', {}, el('tr', {},
      el('td', {}, resultType), el('td', {class: 'value'}, String(result[1]))))));
    return;
  }
  if (!result.length) {
    out.append(el('div', {class: 'empty'}, 'Empty query result: no series matched at this time.'));
    return;
  }
  const shown = result.slice(0, 10000);
  out.append(el('table', {class: 'grid result'}, el('tbody', {}, shown.map((s) => el('tr', {},
    el('td', {class: 'series'}, formatSeries(s.metric)),
    el('td', {class: 'value'}, resultType === 'matrix'
      ? (s.values || []).map(([t, v]) => `${v} @${t}`).join('\n')
      : s.value ? String(s.value[1]) : s.histogram ? JSON.stringify(s.histogram[1]) : ''))))));
  if (result.length > shown.length) out.append(notice('info', `Showing 10000 of ${result.length} series.`));
}

class Panel {
  constructor(page, state) {
    this.page = page;
    this.s = state;
    this.chart = null;
    this.abort = null;
    this.build();
  }

  build() {
    const s = this.s;
    this.input = el('textarea', {class: 'expr', rows: 1, spellcheck: 'false', autocomplete: 'off',
      placeholder: 'Enter expression (press Shift+Enter for newlines)', 'aria-label': 'Expression'});
    this.input.value = s.expr;
    const acBox = el('ul', {class: 'autocomplete', role: 'listbox', hidden: true});
    attachAutocomplete(this.input, acBox, () => this.run(true));
    const fit = () => {
      this.input.style.height = 'auto';
      this.input.style.height = this.input.scrollHeight + 'px';
    };
    this.input.addEventListener('input', fit);
    // a restored expression of several lines is shown whole once the panel is in the page
    requestAnimationFrame(fit);
    const tabs = ['table', 'graph', 'explain'].map((t) => el('button', {
      class: 'tab' + (s.tab === t ? ' active' : ''), 'data-tab': t,
      onclick: () => { s.tab = t; this.root.querySelectorAll('.tab').forEach((b) => b.classList.toggle('active', b.dataset.tab === t)); this.controls(); this.run(true); },
    }, t[0].toUpperCase() + t.slice(1)));
    this.ctrl = el('div', {class: 'controls'});
    this.msgs = el('div', {class: 'messages'});
    this.stats = el('span', {class: 'stats'});
    this.out = el('div', {class: 'output'});
    this.root = el('section', {class: 'panel'},
      el('div', {class: 'editor'},
        el('div', {class: 'expr-wrap'}, this.input, acBox),
        el('button', {class: 'primary execute', onclick: () => this.run(true)}, 'Execute'),
        el('button', {class: 'remove', title: 'Remove panel', onclick: () => this.page.remove(this)}, '✕')),
      el('div', {class: 'tabs'}, tabs, this.stats),
      this.ctrl, this.msgs, this.out);
    this.controls();
  }

  controls() {
    const s = this.s;
    const c = this.ctrl;
    c.replaceChildren();
    if (s.tab === 'graph') {
      const range = el('input', {class: 'range', size: 6, value: formatDuration(s.range), 'aria-label': 'Range',
        onchange: () => { const r = parseDuration(range.value); if (r > 0) { s.range = r; this.run(true); } else range.value = formatDuration(s.range); }});
      const steps = [60, 300, 900, 1800, 3600, 7200, 21600, 43200, 86400, 172800, 604800, 1209600, 2419200];
      const zoom = (dir) => {
        const i = dir > 0 ? steps.findIndex((x) => x > s.range) : steps.map((x) => x < s.range).lastIndexOf(true);
        if (i >= 0) { s.range = steps[i]; range.value = formatDuration(s.range); this.run(true); }
      };
      const end = el('input', {class: 'end', type: 'text', size: 19, placeholder: 'End time (now)', value: s.end ? formatTime(s.end) : '', 'aria-label': 'End time (UTC)',
        onchange: () => { s.end = parseTime(end.value); this.run(true); }});
      const res = el('select', {class: 'res', 'aria-label': 'Resolution',
        onchange: () => {
          if (res.value.startsWith('auto:')) { s.resType = 'auto'; s.resDensity = res.value.slice(5); } else { s.resType = 'custom'; s.resStep = Number(res.value); }
          this.run(true);
        }},
      ['low', 'medium', 'high'].map((d) => el('option', {value: 'auto:' + d}, `auto (${d})`)),
      [1, 5, 10, 15, 30, 60, 300, 900, 3600].map((x) => el('option', {value: String(x)}, `step ${formatDuration(x)}`)));
      res.value = s.resType === 'auto' ? 'auto:' + s.resDensity : String(s.resStep);
      if (res.value === '' && s.resType !== 'auto') {
        res.append(el('option', {value: String(s.resStep)}, `step ${formatDuration(s.resStep)}`));
        res.value = String(s.resStep);
      }
      const mode = el('select', {class: 'mode', 'aria-label': 'Display mode',
        onchange: () => { s.displayMode = mode.value; this.run(true); }},
      el('option', {value: 'lines'}, 'Lines'), el('option', {value: 'stacked'}, 'Stacked'));
      mode.value = s.displayMode;
      c.append(
        el('button', {onclick: () => zoom(-1), title: 'Shorter range'}, '−'), range,
        el('button', {onclick: () => zoom(1), title: 'Longer range'}, '+'),
        end, el('button', {onclick: () => { s.end = null; end.value = ''; this.run(true); }, title: 'End at now'}, 'now'),
        res, mode);
    } else {
      const at = el('input', {class: 'moment', type: 'text', size: 19, placeholder: 'Evaluation time (now)', value: s.moment ? formatTime(s.moment) : '', 'aria-label': 'Evaluation time (UTC)',
        onchange: () => { s.moment = parseTime(at.value); this.run(true); }});
      c.append(at, el('button', {onclick: () => { s.moment = null; at.value = ''; this.run(true); }}, 'now'));
    }
  }

  async run(save) {
    const s = this.s;
    s.expr = this.input.value;
    if (save) this.page.save();
    if (this.abort) this.abort.abort();
    this.abort = new AbortController();
    const signal = this.abort.signal;
    this.msgs.replaceChildren();
    this.stats.textContent = '';
    if (!s.expr.trim()) {
      this.out.replaceChildren(el('div', {class: 'empty'}, 'No expression entered yet.'));
      return;
    }
    const t0 = performance.now();
    this.root.classList.add('loading');
    try {
      if (s.tab === 'explain') {
        const time = (s.moment ?? Date.now()) / 1000;
        const [fmt, tree] = await Promise.all([
          api('api/v1/format_query', {query: s.expr}, {post: true, signal}),
          api('api/v1/parse_query', {query: s.expr}, {post: true, signal})]);
        showMessages(this.msgs, fmt);
        this.out.replaceChildren(el('p', {class: 'help'}, 'The expression as the server parses it, formatted:'),
          el('pre', {class: 'explain'}, fmt.data),
          el('p', {class: 'help'}, `Its syntax tree: each subexpression, what it is, and the series it returns at ${formatTime(time * 1000)} UTC.`));
        await renderTree(this.out, tree.data, time, signal);
        this.stats.textContent = `Load time: ${Math.round(performance.now() - t0)} ms · Nodes: ${this.out.querySelectorAll('li.ast-node').length}`;
      } else if (s.tab === 'table') {
        const time = (s.moment ?? Date.now()) / 1000;
        const env = await api('api/v1/query', {query: s.expr, time}, {post: true, signal});
        showMessages(this.msgs, env);
        this.out.replaceChildren();
        renderTable(this.out, env.data);
        const n = Array.isArray(env.data.result) ? env.data.result.length : 1;
        this.stats.textContent = `Load time: ${Math.round(performance.now() - t0)} ms · Result series: ${n}`;
      } else {
        const step = stepFor(s);
        const end = Math.floor((s.end ?? Date.now()) / 1000 / step) * step;
        const start = end - s.range;
        const env = await api('api/v1/query_range', {query: s.expr, start, end, step}, {post: true, signal});
        showMessages(this.msgs, env);
        const host = el('div', {class: 'chart'});
        this.out.replaceChildren(host);
        if (env.data.result.length === 0) {
          emptyChart(host, 'Empty query result: no series over this range.');
        } else {
          this.chart = drawChart(host, env.data.result, {start, end, step, stacked: s.displayMode === 'stacked',
            onZoom: (a, b) => { s.end = Math.round(b * 1000); s.range = Math.max(1, Math.round(b - a)); this.controls(); this.run(true); }});
        }
        this.stats.textContent = `Load time: ${Math.round(performance.now() - t0)} ms · Resolution: ${formatDuration(step)} · Result series: ${env.data.result.length}`;
      }
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.out.replaceChildren();
      this.msgs.append(notice('error', e instanceof ApiError ? `Error executing query: ${e.message}` : String(e)));
    } finally {
      this.root.classList.remove('loading');
    }
  }
}

class QueryPage {
  constructor(main) {
    this.main = main;
    this.list = el('div', {class: 'panels'});
    main.append(heading('Query'), this.list,
      el('button', {class: 'add', onclick: () => { this.add(defaultPanel()).input.focus(); this.save(); }}, 'Add panel'));
    const states = readPanels(location.search);
    this.panels = [];
    for (const s of states.length ? states : [defaultPanel()]) this.add(s);
    /** Resolves once every panel's first answer is drawn. */
    this.loaded = Promise.all(this.panels.filter((p) => p.s.expr).map((p) => p.run(false)));
    if (!states.length) this.panels[0].input.focus();
  }

  add(state) {
    const p = new Panel(this, state);
    this.panels.push(p);
    this.list.append(p.root);
    return p;
  }

  remove(p) {
    this.panels = this.panels.filter((x) => x !== p);
    p.root.remove();
    if (!this.panels.length) this.add(defaultPanel());
    this.save();
  }

  save() {
    for (const p of this.panels) p.s.expr = p.input.value;
    const qs = writePanels(this.panels.map((p) => p.s));
    history.replaceState(null, '', '?' + qs);
  }
}

export function render(main) {
  return new QueryPage(main);
}

