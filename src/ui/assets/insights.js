// The insights page: what `inferdb advise` finds in the fleet's data over a chosen range
// (inferdb/v1/insights), grouped by severity, each finding with its scope, time span, summary,
// evidence and recommendation, and its queries linked to the query page. The fleet page marks
// the same findings on its charts (fetchFindings, findingLink, KIND_TITLES are shared).

import {el, api, notice, heading, formatHuman, formatDuration, parseDuration, formatTime} from './util.js';
import {writePanels} from './query.js';

const RANGES = ['15m', '1h', '3h', '6h', '12h', '1d', '2d', '7d'];
const SEVERITIES = [
  ['critical', 'Critical'],
  ['warning', 'Warnings'],
  ['info', 'Information'],
];

/** A few words for each kind of finding. */
export const KIND_TITLES = {
  kv_cache_pressure: 'KV-cache pressure',
  prefix_cache_collapse: 'Prefix-cache collapse',
  queueing: 'Queueing',
  underutilized: 'Underutilized',
  slo_breach: 'SLO breach',
  restart: 'Restart',
  target_down: 'Target down',
  operating_point: 'Operating point',
};

/** The findings over [start, end] (Unix seconds), with `slo` ('' for none). */
export async function fetchFindings(start, end, slo) {
  const env = await api('inferdb/v1/insights', {start, end, slo: slo || undefined}, {raw: true});
  return env.data;
}

/** 'meta-llama/Llama-3.1-8B-Instruct · 127.0.0.1:8000' */
export function scopeText(scope) {
  const parts = [];
  if (scope.model_name) parts.push(scope.model_name);
  if (scope.instance) parts.push(scope.instance);
  for (const [k, v] of Object.entries(scope)) if (k !== 'model_name' && k !== 'instance') parts.push(`${k}=${v}`);
  return parts.join(' · ') || 'whole fleet';
}

/** '2026-12-03 19:02:10 – 19:12:40 UTC (10m30s)'; with `short`, without the date. */
export function spanText(f, short) {
  const a = formatTime(f.start * 1000);
  const b = formatTime(f.end * 1000);
  const sameDay = a.slice(0, 10) === b.slice(0, 10);
  return `${short && sameDay ? a.slice(11) : a} – ${sameDay ? b.slice(11) : b} UTC (${formatDuration(Math.max(0, f.end - f.start))})`;
}

/**
 * The query page with `queries` as graphs over the finding's span and a margin on each
 * side (a quarter of the span, 5 minutes at least), ending after it.
 */
export function findingLink(f, queries) {
  const span = Math.max(0, f.end - f.start);
  const margin = Math.max(300, span / 4);
  const range = Math.ceil(span + 2 * margin);
  const end = Math.round((f.end + margin) * 1000);
  return 'query?' + writePanels((queries || f.queries).map((expr) => ({expr, tab: 'graph', range, end, moment: null,
    resType: 'auto', resDensity: 'medium', resStep: null, displayMode: 'lines'})));
}

function evidenceValue(name, v) {
  if (typeof v !== 'number') return String(v);
  if (/_seconds$|_s$/.test(name)) return formatHuman(v, 's');
  if (/(_ratio|_share|_rate|_fraction|usage|attainment)$/.test(name) && Math.abs(v) <= 1) return formatHuman(v, '%');
  return formatHuman(v);
}

function findingCard(f) {
  const title = KIND_TITLES[f.kind] || f.kind;
  return el('article', {class: `finding ${f.severity}`, 'data-kind': f.kind, 'data-severity': f.severity},
    el('header', {},
      el('span', {class: `health ${f.severity === 'info' ? 'ok' : f.severity === 'warning' ? 'pending' : 'firing'}`}, f.severity.toUpperCase()),
      el('h3', {}, title),
      el('span', {class: 'finding-scope'}, Object.entries(f.scope).map(([k, v]) => el('span', {class: 'badge'}, `${k}="${v}"`))),
      el('span', {class: 'finding-span'}, spanText(f))),
    el('p', {class: 'finding-summary'}, f.summary),
    Object.keys(f.evidence).length ? el('table', {class: 'grid evidence'},
      el('tbody', {}, Object.entries(f.evidence).map(([k, v]) => el('tr', {},
        el('th', {scope: 'row'}, k), el('td', {class: 'num', title: String(v)}, evidenceValue(k, v)))))) : null,
    el('p', {class: 'finding-rec'}, el('strong', {}, 'Recommendation: '), f.recommendation),
    f.queries.length ? el('div', {class: 'finding-queries'},
      el('span', {}, 'Queries: '),
      f.queries.map((q) => el('a', {class: 'finding-query', href: findingLink(f, [q]), title: 'Open on the query page'}, el('code', {}, q))),
      f.queries.length > 1 ? el('a', {class: 'finding-all', href: findingLink(f)}, 'all on one page ↗') : null) : null);
}

class InsightsPage {
  constructor(main) {
    const u = new URLSearchParams(location.search);
    this.range = RANGES.includes(u.get('range')) ? u.get('range') : '1h';
    this.slo = u.get('slo') || '';
    const endAt = Number(u.get('end'));
    this.end = u.get('end') && isFinite(endAt) && endAt > 0 ? endAt : null;
    const range = el('select', {class: 'range', 'aria-label': 'Range',
      onchange: () => { this.range = range.value; this.save(); this.load(); }},
    RANGES.map((r) => el('option', {value: r}, 'last ' + r)));
    range.value = this.range;
    const slo = el('input', {class: 'slo', type: 'text', size: 36, value: this.slo, 'aria-label': 'SLOs',
      placeholder: 'SLOs, e.g. ttft_p95=500ms,itl_p95=50ms,e2e_p95=30s',
      onchange: () => { this.slo = slo.value.trim(); this.save(); this.load(); }});
    this.stats = el('span', {class: 'stats'});
    this.body = el('div', {class: 'insights'});
    main.append(heading('Insights', 'What inferdb finds wrong with the vLLM fleet over the range (the same as inferdb advise), ' +
      'most severe first, with the evidence, what to change, and the queries that show it.'),
    el('div', {class: 'controls'}, el('label', {}, 'Range ', range), el('label', {}, 'SLOs ', slo),
      el('button', {onclick: () => this.load()}, 'Analyse again'), this.stats),
    this.body);
    this.loaded = this.load();
  }

  save() {
    const p = {range: this.range};
    if (this.slo) p.slo = this.slo;
    if (this.end !== null) p.end = String(this.end);
    history.replaceState(null, '', '?' + new URLSearchParams(p));
  }

  async load() {
    const seq = (this.seq = (this.seq || 0) + 1);
    const end = this.end ?? Math.floor(Date.now() / 1000);
    const start = end - parseDuration(this.range);
    this.body.replaceChildren(el('div', {class: 'empty'}, 'Analysing…'));
    const t0 = performance.now();
    let report;
    try {
      report = await fetchFindings(start, end, this.slo);
    } catch (e) {
      if (seq === this.seq) this.body.replaceChildren(notice('error', `Error: ${e.message}`));
      return;
    }
    if (seq !== this.seq) return;
    this.stats.textContent = `${report.findings.length} findings · ${Math.round(performance.now() - t0)} ms`;
    const w = report.window;
    const nodes = [el('p', {class: 'help window'}, `From ${formatTime(w.start * 1000)} to ${formatTime(w.end * 1000)} UTC.`)];
    const counts = el('p', {class: 'alert-counts'});
    nodes.push(counts);
    for (const [sev, title] of SEVERITIES) {
      const fs = report.findings.filter((f) => f.severity === sev);
      counts.append(el('span', {class: `health ${sev === 'info' ? 'ok' : sev === 'warning' ? 'pending' : 'firing'}`}, `${sev} (${fs.length})`));
      if (!fs.length) continue;
      nodes.push(el('section', {class: 'severity', 'data-severity': sev}, el('h2', {}, `${title} (${fs.length})`), fs.map(findingCard)));
    }
    if (!report.findings.length) {
      nodes.push(el('div', {class: 'empty'}, 'No findings in this range: no vLLM series show KV-cache pressure, a prefix-cache ' +
        'collapse, queueing, idle capacity, restarts or targets down' + (this.slo ? ', and every SLO given is met.' : '. ') +
        (this.slo ? '' : 'Give SLOs above to check latency targets too.')));
    }
    this.body.replaceChildren(...nodes);
  }
}

export function render(main) {
  return new InsightsPage(main);
}
