// The vLLM fleet page: per model (or per model and instance) over a chosen range, with
// auto-refresh: tokens/s, latency quantiles, KV cache, prefix-cache hits, preemptions, queue,
// time in system by Little's law, GPUs. Every expression reads old and new vLLM metric names,
// every panel links to its expressions on the query page, and an empty panel says why. The
// findings of inferdb/v1/insights over the range are listed and shaded on the panels they
// concern.

import {el, api, formatHuman, formatDuration, parseDuration, notice, heading} from './util.js';
import {drawChart, emptyChart, color, setMarks} from './chart.js';
import {writePanels} from './query.js';
import {fetchFindings, findingLink, scopeText, spanText, KIND_TITLES} from './insights.js';

const RANGES = ['15m', '1h', '3h', '6h', '12h', '1d', '2d', '7d'];
const REFRESH = ['off', '5s', '15s', '30s', '1m', '5m'];
const GROUPS = {model: 'model_name', instance: 'model_name, instance'};
const QUANTILES = [0.5, 0.95, 0.99];

// `a or b` of the same computation over metric names old and new vLLM versions use (the
// left one wins where both exist).
const either = (names, f) => names.map(f).join(' or ');

/** The expressions of the fleet page, grouped by `g` over rate windows of `w`. */
export function expressions(g, w) {
  const hist = (names) => (q) =>
    `histogram_quantile(${q}, sum by (le, ${g}) (${either(names, (n) => `rate(${n}_bucket[${w}])`)}))`;
  return {
    gen: {title: 'Generation tokens/s', unit: '', needs: ['vllm:generation_tokens_total'],
      expr: `sum by (${g}) (rate(vllm:generation_tokens_total[${w}]))`},
    prompt: {title: 'Prompt tokens/s', unit: '', needs: ['vllm:prompt_tokens_total'],
      expr: `sum by (${g}) (rate(vllm:prompt_tokens_total[${w}]))`},
    ttft: {title: 'Time to first token', unit: 's', needs: ['vllm:time_to_first_token_seconds_bucket'],
      q: hist(['vllm:time_to_first_token_seconds'])},
    itl: {title: 'Inter-token latency', unit: 's',
      needs: ['vllm:inter_token_latency_seconds_bucket', 'vllm:time_per_output_token_seconds_bucket'],
      q: hist(['vllm:inter_token_latency_seconds', 'vllm:time_per_output_token_seconds'])},
    e2e: {title: 'End-to-end latency', unit: 's', needs: ['vllm:e2e_request_latency_seconds_bucket'],
      q: hist(['vllm:e2e_request_latency_seconds'])},
    kv: {title: 'KV-cache usage (max)', unit: '%', needs: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
      expr: `max by (${g}) (vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc)`},
    prefix: {title: 'Prefix-cache hit rate', unit: '%',
      needs: ['vllm:prefix_cache_queries_total', 'vllm:gpu_prefix_cache_queries_total', 'vllm:gpu_prefix_cache_hit_rate'],
      expr: `(sum by (${g}) (${either(['vllm:prefix_cache_hits_total', 'vllm:gpu_prefix_cache_hits_total'], (n) => `rate(${n}[${w}])`)})` +
        ` / sum by (${g}) (${either(['vllm:prefix_cache_queries_total', 'vllm:gpu_prefix_cache_queries_total'], (n) => `rate(${n}[${w}])`)}))` +
        ` or avg by (${g}) (vllm:gpu_prefix_cache_hit_rate)`},
    preempt: {title: 'Preemptions per minute', unit: '', needs: ['vllm:num_preemptions_total'],
      expr: `60 * sum by (${g}) (rate(vllm:num_preemptions_total[${w}]))`},
    running: {title: 'Requests running', unit: '', needs: ['vllm:num_requests_running'],
      expr: `sum by (${g}) (vllm:num_requests_running)`},
    waiting: {title: 'Requests waiting', unit: '', needs: ['vllm:num_requests_waiting'],
      expr: `sum by (${g}) (vllm:num_requests_waiting)`},
    little: {title: "Time in system (Little's law)", unit: 's', needs: ['vllm:request_success_total'],
      help: '(running + waiting) ÷ requests finished per second',
      expr: `(sum by (${g}) (vllm:num_requests_running) + sum by (${g}) (vllm:num_requests_waiting))` +
        ` / sum by (${g}) (rate(vllm:request_success_total[${w}]))`},
  };
}

/** The panels on which each kind of finding is shaded. */
const KIND_PANELS = {
  kv_cache_pressure: ['kv', 'preempt', 'itl', 'gen'],
  prefix_cache_collapse: ['prefix', 'kv', 'ttft'],
  queueing: ['waiting', 'running', 'little', 'ttft'],
  underutilized: ['running', 'gen', 'gpu_util'],
  slo_breach: ['ttft', 'itl', 'e2e'],
  restart: ['gen', 'prompt', 'running'],
  target_down: ['gen', 'prompt', 'running'],
};
const MARK_COLORS = {critical: 'rgba(179, 38, 30, 0.18)', warning: 'rgba(224, 160, 48, 0.24)', info: 'rgba(43, 76, 126, 0.14)'};
const SWATCH_COLORS = {critical: '#b3261e', warning: '#e0a030', info: '#2b4c7e'};

const GPU_REASON = 'No DCGM_FI_DEV_* series in this range: inferdb samples GPUs through NVML, ' +
  'which is not available on this host (or serve runs with --no-gpu), and no dcgm-exporter target is scraped.';

/** GPU panels over dcgm-exporter's names (which inferdb's NVML sampler also writes). */
export function gpuExpressions() {
  const by = 'Hostname, gpu, modelName';
  const needs = ['DCGM_FI_DEV_GPU_UTIL'];
  return {
    gpu_util: {title: 'GPU utilisation', unit: '%', needs, expr: `max by (${by}) (DCGM_FI_DEV_GPU_UTIL) / 100`},
    gpu_mem: {title: 'GPU memory used', unit: '%', needs: ['DCGM_FI_DEV_FB_USED'],
      expr: `max by (${by}) (DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE))`},
    gpu_power: {title: 'GPU power', unit: 'W', needs: ['DCGM_FI_DEV_POWER_USAGE'], expr: `max by (${by}) (DCGM_FI_DEV_POWER_USAGE)`},
    gpu_temp: {title: 'GPU temperature', unit: '°C', needs: ['DCGM_FI_DEV_GPU_TEMP'], expr: `max by (${by}) (DCGM_FI_DEV_GPU_TEMP)`},
  };
}

/** The query-page link of a panel's expressions, as graphs over `range` seconds. */
function queryLink(exprs, range, stacked) {
  return 'query?' + writePanels(exprs.map((expr) => ({expr, tab: 'graph', range, end: null, moment: null,
    resType: 'auto', resDensity: 'medium', resStep: null, displayMode: stacked ? 'stacked' : 'lines'})));
}

function panelExprs(p) {
  return p.q ? QUANTILES.map((q) => p.q(q)) : [p.expr];
}

const DASH = {p50: undefined, p95: [6, 4], p99: [2, 3]};
const groupKey = (m) => JSON.stringify(Object.entries(m).filter(([k]) => k !== 'quantile'));

/** Legend text: the model first, then the other labels, then the quantile. */
function legendOf(m) {
  const parts = [];
  if (m.model_name !== undefined) parts.push(m.model_name);
  for (const [k, v] of Object.entries(m)) if (k !== 'model_name' && k !== 'quantile') parts.push(`${k}=${v}`);
  if (m.quantile) parts.push(m.quantile);
  return parts.join(' · ') || '(no labels)';
}

const keyOf = (metric, labels) => JSON.stringify(labels.map((l) => metric[l] ?? ''));

class FleetPage {
  constructor(main) {
    const u = new URLSearchParams(location.search);
    this.range = RANGES.includes(u.get('range')) ? u.get('range') : '1h';
    this.refresh = REFRESH.includes(u.get('refresh')) ? u.get('refresh') : '30s';
    this.by = GROUPS[u.get('by')] ? u.get('by') : 'model';
    // a fixed moment (Unix seconds) shows the fleet as it was then, without refreshing
    const at = Number(u.get('time'));
    this.time = u.get('time') && isFinite(at) && at > 0 ? at : null;
    this.charts = [];
    this.timer = null;
    const sel = (label, cls, opts, value, set) => {
      const s = el('select', {class: cls, 'aria-label': label, onchange: () => { set(s.value); this.save(); this.load(); }},
        opts.map((o) => el('option', {value: o[0]}, o[1])));
      s.value = value;
      return el('label', {}, label + ' ', s);
    };
    this.controls = el('div', {class: 'controls fleet-controls'},
      sel('Range', 'range', RANGES.map((r) => [r, 'last ' + r]), this.range, (v) => (this.range = v)),
      sel('Refresh', 'refresh', REFRESH.map((r) => [r, r === 'off' ? 'off' : 'every ' + r]), this.refresh, (v) => (this.refresh = v)),
      sel('Per', 'by', [['model', 'model'], ['instance', 'model and instance']], this.by, (v) => (this.by = v)),
      el('button', {onclick: () => this.load()}, 'Refresh now'),
      this.updated = el('span', {class: 'stats'}));
    this.msgs = el('div', {class: 'messages'});
    this.body = el('div', {class: 'fleet'});
    this.loaded = new Promise((resolve) => (this.onLoaded = resolve));
    main.append(heading('vLLM fleet', 'Throughput, latency, caches, queue and GPUs of every vLLM server scraped. ' +
      'Each panel links to its expressions on the query page.'), this.controls, this.msgs, this.body);
    this.load();
  }

  save() {
    const p = {range: this.range, refresh: this.refresh, by: this.by};
    if (this.time !== null) p.time = String(this.time);
    history.replaceState(null, '', '?' + new URLSearchParams(p));
  }

  schedule() {
    clearTimeout(this.timer);
    const s = parseDuration(this.refresh);
    if (s > 0 && this.time === null) this.timer = setTimeout(() => this.load(), s * 1000);
  }

  /** The scrape interval of the vLLM targets (the longest), seconds; 15 when unknown. */
  async scrapeInterval() {
    try {
      const t = (await api('api/v1/targets', {state: 'active'})).data.activeTargets;
      const iv = t.map((x) => parseDuration(x.scrapeInterval)).filter((x) => x > 0);
      return iv.length ? Math.max(...iv) : 15;
    } catch (e) {
      return 15;
    }
  }

  async load() {
    const seq = (this.seq = (this.seq || 0) + 1);
    const range = parseDuration(this.range);
    const step = Math.max(1, Math.ceil(range / 250));
    const now = this.time ?? Date.now() / 1000;
    const end = Math.floor(now / step) * step;
    const start = end - range;
    const interval = await this.scrapeInterval();
    // windows: four scrapes at least (as Grafana's $__rate_interval), two steps on long ranges
    const wTable = formatDuration(Math.max(60, 4 * interval));
    const wChart = formatDuration(Math.max(60, 4 * interval, 2 * step));
    const g = GROUPS[this.by];
    const groupLabels = g.split(', ');
    const tableExprs = expressions(g, wTable);
    const chartExprs = expressions(g, wChart);
    const t = Math.round(now * 1000) / 1000;
    const msgs = [];
    let table;
    try {
      table = await this.summary(tableExprs, groupLabels, t, wTable, msgs);
    } catch (e) {
      this.msgs.replaceChildren(notice('error', `Error: ${e.message}`));
      this.onLoaded();
      this.schedule();
      return;
    }
    if (seq !== this.seq) return;
    for (const c of this.charts) c.destroy();
    this.charts = [];
    const sections = [
      ['Throughput', ['gen', 'prompt']],
      ['Latency (p50, p95, p99)', ['ttft', 'itl', 'e2e']],
      ['Caches', ['kv', 'prefix']],
      ['Queue', ['running', 'waiting', 'preempt', 'little']],
    ];
    const view = {start, end, step, range};
    const findingsBox = el('div', {class: 'fleet-findings-box'}, el('div', {class: 'empty'}, 'Looking for findings…'));
    this.panels = new Map();
    const nodes = [table, el('h2', {}, 'Findings in this range'), findingsBox];
    const jobs = [];
    for (const [title, ids] of sections) {
      const grid = el('div', {class: 'chart-grid'});
      nodes.push(el('h2', {}, title), grid);
      for (const id of ids) jobs.push(this.panel(grid, id, chartExprs[id], view, null));
    }
    const gpu = gpuExpressions();
    const grid = el('div', {class: 'chart-grid'});
    nodes.push(el('h2', {}, 'GPUs'), grid);
    for (const [id, p] of Object.entries(gpu)) jobs.push(this.panel(grid, id, p, view, GPU_REASON));
    this.msgs.replaceChildren(...msgs);
    this.body.replaceChildren(...nodes);
    await Promise.all(jobs);
    if (seq !== this.seq) return;
    this.onLoaded();
    this.updated.textContent = `Updated ${new Date().toLocaleTimeString()} · rate windows ${wTable} (table), ${wChart} (charts)`;
    this.schedule();
    // the findings of the range once the panels are drawn (the analysis takes a few queries
    // of its own; the page is usable before it ends)
    const fs = await fetchFindings(start, end, '').then((r) => r.findings, (e) => ({error: e}));
    if (seq === this.seq) this.showFindings(fs, findingsBox);
  }

  /** Lists the findings (or why there are none) and shades them on the panels they concern. */
  showFindings(fs, box) {
    if (fs.error) {
      box.replaceChildren(notice('warning', `Findings unavailable: ${fs.error.message}`));
      this.body.dataset.findings = 'error';
      return;
    }
    const details = 'insights?' + new URLSearchParams({range: this.range});
    this.body.dataset.findings = String(fs.length);
    if (!fs.length) {
      box.replaceChildren(el('div', {class: 'empty'}, 'No findings in this range: no KV-cache pressure, prefix-cache collapse, ' +
        'queueing, idle capacity, restart or target down. ', el('a', {href: details}, 'See the insights page.')));
    } else {
      box.replaceChildren(el('ul', {class: 'fleet-findings'}, fs.map((f) => el('li', {'data-kind': f.kind, 'data-severity': f.severity},
        el('span', {class: 'marker-swatch', style: `background: ${SWATCH_COLORS[f.severity]}`}),
        el('strong', {}, `${KIND_TITLES[f.kind] || f.kind}`), ` (${f.severity}) — ${scopeText(f.scope)}, ${spanText(f)}: ${f.summary} `,
        f.queries.length ? el('a', {href: findingLink(f)}, 'graph ↗') : null, ' · ',
        el('a', {href: details}, 'details')))));
    }
    for (const [id, {chart, box: panel}] of this.panels) {
      const marks = fs.filter((f) => (KIND_PANELS[f.kind] || []).includes(id));
      panel.querySelector('.chart-marks')?.remove();
      if (chart) setMarks(chart, marks.map((f) => ({start: f.start, end: f.end, color: MARK_COLORS[f.severity]})));
      if (!marks.length) continue;
      panel.querySelector('.chart-head').after(el('p', {class: 'chart-marks'}, 'Shaded: ', marks.map((f) => el('span', {class: 'mark', 'data-kind': f.kind},
        el('span', {class: 'marker-swatch', style: `background: ${SWATCH_COLORS[f.severity]}`}),
        `${KIND_TITLES[f.kind] || f.kind} (${scopeText(f.scope)}) ${spanText(f, true)}`))));
    }
  }

  /** The table of current values, one row per model (or model and instance). */
  async summary(ex, groupLabels, t, w, msgs) {
    const cols = [
      ['gen', 'Gen tok/s', (p) => p.expr, ''],
      ['prompt', 'Prompt tok/s', (p) => p.expr, ''],
      ['ttft', 'TTFT p50', (p) => p.q(0.5), 's'],
      ['ttft', 'TTFT p95', (p) => p.q(0.95), 's'],
      ['ttft', 'TTFT p99', (p) => p.q(0.99), 's'],
      ['itl', 'ITL p95', (p) => p.q(0.95), 's'],
      ['e2e', 'E2E p95', (p) => p.q(0.95), 's'],
      ['kv', 'KV cache', (p) => p.expr, '%'],
      ['prefix', 'Prefix hits', (p) => p.expr, '%'],
      ['preempt', 'Preempt/min', (p) => p.expr, ''],
      ['running', 'Running', (p) => p.expr, ''],
      ['waiting', 'Waiting', (p) => p.expr, ''],
      ['little', 'Time in system', (p) => p.expr, 's'],
    ].map(([id, title, f, unit]) => ({id, title, expr: f(ex[id]), unit}));
    const answers = await Promise.all(cols.map((c) => api('api/v1/query', {query: c.expr, time: t}, {post: true})));
    const rows = new Map();
    answers.forEach((env, i) => {
      for (const w of env.warnings || []) msgs.push(notice('warning', `${cols[i].title}: ${w}`));
      for (const s of env.data.result) {
        const k = keyOf(s.metric, groupLabels);
        if (!rows.has(k)) rows.set(k, {metric: s.metric, cells: new Map()});
        rows.get(k).cells.set(i, s.value[1]);
      }
    });
    const sorted = [...rows.entries()].sort((a, b) => a[0].localeCompare(b[0]));
    if (!sorted.length) {
      return el('div', {class: 'empty summary-empty'},
        `No vLLM series at ${new Date(t * 1000).toLocaleTimeString()}: no target exposing vllm:* metrics has been scraped ` +
        'in the last 5 minutes. ', el('a', {href: 'targets'}, 'See the targets page.'));
    }
    const head = groupLabels.map((l) => (l === 'model_name' ? 'Model' : 'Instance'))
      .concat(cols.map((c) => el('a', {href: queryLink([c.expr], 3600), title: c.expr}, c.title)));
    return el('div', {class: 'summary-wrap'}, el('table', {class: 'grid summary', 'data-time': String(t)},
      el('caption', {}, `Now (rate windows ${w})`),
      el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
      el('tbody', {}, sorted.map(([k, r]) => el('tr', {'data-key': k},
        groupLabels.map((l) => el('th', {class: l === 'model_name' ? 'model' : 'instance', scope: 'row'}, r.metric[l] ?? '')),
        cols.map((c, i) => {
          const raw = r.cells.get(i);
          return el('td', {class: 'num', 'data-col': c.id, 'data-expr': c.expr, 'data-raw': raw ?? '', 'data-unit': c.unit,
            title: raw === undefined ? 'no value: see the panel below' : raw},
          raw === undefined ? '–' : formatHuman(Number(raw), c.unit));
        }))))));
  }

  /** One chart panel; quantile panels draw p50/p95/p99 of each group. */
  async panel(grid, id, p, view, reason) {
    const exprs = panelExprs(p);
    const host = el('div', {class: 'chart'});
    const box = el('section', {class: 'chart-panel', 'data-panel': id},
      el('div', {class: 'chart-head'}, el('h3', {}, p.title),
        el('a', {class: 'to-query', href: queryLink(exprs, view.range), title: 'Open on the query page'}, 'query ↗')),
      p.help ? el('p', {class: 'help'}, p.help) : null, host);
    grid.append(box);
    this.panels.set(id, {chart: null, box});
    try {
      const answers = await Promise.all(exprs.map((q) => api('api/v1/query_range',
        {query: q, start: view.start, end: view.end, step: view.step}, {post: true})));
      let result = [];
      answers.forEach((env, i) => {
        for (const s of env.data.result) {
          const metric = Object.assign({}, s.metric);
          if (p.q) metric.quantile = `p${Math.round(QUANTILES[i] * 100)}`;
          result.push({metric, values: s.values});
        }
      });
      if (!result.length) {
        emptyChart(host, reason || await this.why(p, view));
        return;
      }
      // one colour per model (or model and instance); quantiles by dash: p50 solid, p95 dashed, p99 dotted
      const groups = [...new Set(result.map((s) => groupKey(s.metric)))];
      const chart = drawChart(host, result, {start: view.start, end: view.end, step: view.step, unit: p.unit, height: 200,
        legend: legendOf,
        style: (m) => ({stroke: color(groups.indexOf(groupKey(m))), dash: DASH[m.quantile]})});
      if (chart) {
        this.charts.push(chart);
        this.panels.set(id, {chart, box});
      }
    } catch (e) {
      host.replaceChildren(notice('error', `Error: ${e.message}`));
    }
  }

  /** Why a vLLM panel is empty: its metrics were never seen, or they were but give no value. */
  async why(p, view) {
    let seen = [];
    try {
      seen = (await api('api/v1/series', {'match[]': p.needs, start: view.start, end: view.end})).data;
    } catch (e) {
      return `No data (and the series lookup failed: ${e.message}).`;
    }
    if (!seen.length) {
      return `No series named ${p.needs.join(' or ')} in this range: no vLLM target exposing it has been scraped ` +
        '(see the targets page), or this vLLM version does not export it.';
    }
    return 'The series exist, but the expression has no value in this range: ' +
      'for example no request finished, so the rates are 0 ÷ 0.';
  }
}

export function render(main) {
  return new FleetPage(main);
}
