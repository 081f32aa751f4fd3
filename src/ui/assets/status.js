// The status pages: targets, service discovery, rules, alerts, TSDB status, configuration,
// command-line flags, runtime and build information. Each reads the same API Grafana reads.

import {el, api, ago, labelBadges, notice, heading, table, formatHuman, formatDuration} from './util.js';

/** Loads `path` into a new box appended to `main` now; resolves once drawn. */
async function load(main, path, params, draw) {
  const box = el('div', {class: 'content'}, el('div', {class: 'empty'}, 'Loading…'));
  main.append(box);
  try {
    const env = await api(path, params);
    box.replaceChildren();
    draw(box, env.data);
  } catch (e) {
    box.replaceChildren(notice('error', `Error loading ${path}: ${e.message}`));
  }
}

const filterInput = (placeholder, onInput) =>
  el('input', {class: 'filter', type: 'search', placeholder, 'aria-label': placeholder, oninput: (e) => onInput(e.target.value.toLowerCase())});

function health(h) {
  return el('span', {class: `health ${h}`}, h.toUpperCase());
}

function byPool(targets) {
  const pools = new Map();
  for (const t of targets) {
    if (!pools.has(t.scrapePool)) pools.set(t.scrapePool, []);
    pools.get(t.scrapePool).push(t);
  }
  return [...pools.entries()].sort((a, b) => a[0].localeCompare(b[0]));
}

function targets(main) {
  main.append(heading('Targets', 'Every scrape target by job: health, labels, last scrape and its error.'));
  let text = '';
  let unhealthy = false;
  const bar = el('div', {class: 'controls'});
  main.append(bar);
  return load(main, 'api/v1/targets', {state: 'active'}, (box, data) => {
    const draw = () => {
      const nodes = [];
      for (const [pool, ts] of byPool(data.activeTargets)) {
        const shown = ts.filter((t) => (!unhealthy || t.health !== 'up') &&
          (!text || [t.scrapeUrl, t.lastError, t.health, ...Object.entries(t.labels).map(([k, v]) => `${k}="${v}"`)]
            .some((s) => s.toLowerCase().includes(text))));
        if (!shown.length) continue;
        const up = ts.filter((t) => t.health === 'up').length;
        nodes.push(el('details', {class: 'pool', open: true, 'data-pool': pool},
          el('summary', {}, el('span', {class: 'pool-name'}, pool), ` (${up}/${ts.length} up)`),
          table(['Endpoint', 'State', 'Labels', 'Last scrape', 'Scrape duration', 'Error'],
            shown.map((t) => [
              el('a', {href: t.scrapeUrl}, t.scrapeUrl), health(t.health), labelBadges(t.labels),
              t.lastScrape.startsWith('0001') ? 'never' : ago(Date.parse(t.lastScrape)),
              formatHuman(t.lastScrapeDuration, 's'),
              t.lastError ? el('span', {class: 'scrape-error'}, t.lastError) : '']),
            {class: 'grid targets'})));
      }
      box.replaceChildren(...(nodes.length ? nodes : [el('div', {class: 'empty'},
        data.activeTargets.length ? 'No target matches the filter.' :
          'No targets: give --config.file with scrape_configs, --scrape URL or --demo.')]));
    };
    bar.append(filterInput('Filter by endpoint, label or error', (v) => { text = v; draw(); }),
      el('label', {}, el('input', {type: 'checkbox', onchange: (e) => { unhealthy = e.target.checked; draw(); }}), ' unhealthy only'));
    draw();
  });
}

function serviceDiscovery(main) {
  main.append(heading('Service discovery', 'Each target\'s labels as discovered, and after relabelling.'));
  return load(main, 'api/v1/targets', {}, (box, data) => {
    const pools = byPool(data.activeTargets.concat((data.droppedTargets || []).map((t) =>
      Object.assign({scrapePool: t.scrapePool || t.discoveredLabels.job || '(dropped)', dropped: true}, t))));
    if (!pools.length) {
      box.append(el('div', {class: 'empty'}, 'No targets discovered.'));
      return;
    }
    const counts = data.droppedTargetCounts || {};
    for (const [pool, ts] of pools) {
      const active = ts.filter((t) => !t.dropped).length;
      box.append(el('details', {class: 'pool', open: true},
        el('summary', {}, el('span', {class: 'pool-name'}, pool), ` (${active} active / ${counts[pool] ?? ts.length - active} dropped)`),
        table(['Discovered labels', 'Target labels'],
          ts.map((t) => [labelBadges(t.discoveredLabels), t.dropped ? el('span', {class: 'dropped'}, 'Dropped') : labelBadges(t.labels)]))));
    }
  });
}

/** 'last evaluation 3.2s ago, took 1.2 ms' (or 'never evaluated'). */
function evaluated(x) {
  if (!x.lastEvaluation || x.lastEvaluation.startsWith('0001')) return 'never evaluated';
  const took = x.evaluationTime !== undefined ? `, took ${formatHuman(x.evaluationTime, 's')}` : '';
  return `last evaluation ${ago(Date.parse(x.lastEvaluation))}${took}`;
}

/** Annotations as 'name: value' lines. */
function annotationList(a) {
  const es = Object.entries(a || {});
  return es.length ? el('dl', {class: 'annotations'}, es.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])) : null;
}

/** A duration in seconds as Prometheus writes it ('10m'), for `for` and `keep_firing_for`. */
const secs = (s) => formatDuration(Number(s));

/** The text a rule is found by: its name, group, file, query, labels and annotations. */
function ruleText(g, r) {
  return [g.name, g.file || '', r.name, r.query, r.health || '', r.lastError || '',
    ...Object.entries(r.labels || {}).map(([k, v]) => `${k}="${v}"`),
    ...Object.values(r.annotations || {})].join('\n').toLowerCase();
}

function ruleTable(rules) {
  return table(['Rule', 'State', 'Error', 'Last evaluation', 'Evaluation time'], rules.map((r) => [
    el('div', {'data-rule': r.name},
      el('div', {class: 'rule-name'}, (r.type === 'alerting' ? 'alert: ' : 'record: ') + r.name),
      el('pre', {class: 'rule-expr'}, r.query),
      r.duration ? el('div', {}, `for: ${secs(r.duration)}`) : null,
      r.keepFiringFor ? el('div', {}, `keep_firing_for: ${secs(r.keepFiringFor)}`) : null,
      r.labels && Object.keys(r.labels).length ? el('div', {}, 'labels: ', labelBadges(r.labels)) : null,
      annotationList(r.annotations)),
    health(r.health || 'unknown'), r.lastError ? el('span', {class: 'scrape-error'}, r.lastError) : '',
    r.lastEvaluation && !r.lastEvaluation.startsWith('0001') ? ago(Date.parse(r.lastEvaluation)) : 'never',
    r.evaluationTime !== undefined ? formatHuman(r.evaluationTime, 's') : '']));
}

function rules(main) {
  main.append(heading('Rules', 'Recording and alerting rules by group, with their health, last evaluation and error.'));
  const bar = el('div', {class: 'controls'});
  main.append(bar);
  let text = '';
  let unhealthy = false;
  return load(main, 'api/v1/rules', {}, (box, data) => {
    if (!data.groups.length) {
      box.append(el('div', {class: 'empty'}, 'No rules loaded: list rule files under rule_files in the configuration ' +
        '(deploy/rules/vllm.yml has vLLM rules) and reload.'));
      return;
    }
    const draw = () => {
      const nodes = [];
      for (const g of data.groups) {
        const shown = g.rules.filter((r) => (!unhealthy || r.health === 'err') && (!text || ruleText(g, r).includes(text)));
        if (!shown.length) continue;
        const bad = g.rules.filter((r) => r.health === 'err').length;
        nodes.push(el('details', {class: 'pool', open: true, 'data-group': g.name},
          el('summary', {}, el('span', {class: 'pool-name'}, g.name),
            ` ${g.file || ''} · every ${secs(g.interval)} · ${g.rules.length} rules${bad ? `, ${bad} failing` : ''} · ${evaluated(g)}`),
          ruleTable(shown)));
      }
      box.replaceChildren(...(nodes.length ? nodes : [el('div', {class: 'empty'}, 'No rule matches the filter.')]));
    };
    bar.append(filterInput('Filter by name, expression, label or group', (v) => { text = v; draw(); }),
      el('label', {}, el('input', {type: 'checkbox', onchange: (e) => { unhealthy = e.target.checked; draw(); }}), ' failing only'));
    draw();
  });
}

const STATES = ['firing', 'pending', 'inactive'];

function alerts(main) {
  main.append(heading('Alerts', 'Alerting rules by state, with their active alerts: labels, annotations, since when, value.'));
  const bar = el('div', {class: 'controls'});
  main.append(bar);
  let text = '';
  const states = new Set(STATES);
  return load(main, 'api/v1/rules', {type: 'alert'}, (box, data) => {
    const rs = data.groups.flatMap((g) => g.rules.filter((r) => r.type === 'alerting')
      .map((r) => Object.assign({group: g.name, text: ruleText(g, r) + '\n' +
        (r.alerts || []).flatMap((a) => Object.entries(a.labels).map(([k, v]) => `${k}="${v}"`)).join('\n').toLowerCase()}, r)));
    if (!rs.length) {
      box.append(el('div', {class: 'empty'}, 'No alerting rules: list rule files under rule_files in the configuration ' +
        '(deploy/rules/vllm.yml has vLLM alerts) and reload.'));
      return;
    }
    const counts = {firing: 0, pending: 0, inactive: 0};
    for (const r of rs) counts[r.state] = (counts[r.state] || 0) + 1;
    const order = {firing: 0, pending: 1, inactive: 2};
    rs.sort((a, b) => (order[a.state] ?? 3) - (order[b.state] ?? 3) || a.name.localeCompare(b.name));
    const list = el('div');
    const draw = () => {
      const shown = rs.filter((r) => states.has(r.state) && (!text || r.text.includes(text)));
      list.replaceChildren(...(shown.length ? shown.map((r) => el('details', {class: `pool alert ${r.state}`, open: r.state !== 'inactive', 'data-alert': r.name},
        el('summary', {}, el('span', {class: `health ${r.state}`}, r.state.toUpperCase()), ' ',
          el('span', {class: 'pool-name'}, r.name), ` (${(r.alerts || []).length} active) · group ${r.group}`),
        el('pre', {class: 'rule-expr'}, r.query),
        r.duration ? el('div', {}, `for: ${secs(r.duration)}`) : null,
        r.labels && Object.keys(r.labels).length ? el('div', {}, 'labels: ', labelBadges(r.labels)) : null,
        annotationList(r.annotations),
        (r.alerts || []).length ? table(['Labels', 'State', 'Active since', 'Value', 'Annotations'], r.alerts.map((a) => [
          labelBadges(a.labels), health(a.state),
          a.activeAt ? el('span', {title: a.activeAt}, `${a.activeAt.replace('T', ' ').replace(/\.\d+/, '')} (${ago(Date.parse(a.activeAt))})`) : '',
          String(a.value), annotationList(a.annotations) || '']), {class: 'grid active-alerts'}) : null)) :
        [el('div', {class: 'empty'}, 'No alerting rule matches the filter.')]));
    };
    bar.append(filterInput('Filter by name, expression or label', (v) => { text = v; draw(); }),
      ...STATES.map((s) => el('label', {}, el('input', {type: 'checkbox', checked: true, 'data-state': s,
        onchange: (e) => { if (e.target.checked) states.add(s); else states.delete(s); draw(); }}),
      ' ', el('span', {class: `health ${s}`}, `${s} (${counts[s]})`))));
    box.append(list);
    draw();
  });
}

function tsdbStatus(main) {
  main.append(heading('TSDB status', 'Head statistics and the cardinality top lists.'));
  const head = load(main, 'api/v1/status/tsdb', {limit: 10}, (box, d) => {
    const h = d.headStats;
    const t = (ms) => (ms && Math.abs(ms) < 1e15 ? new Date(ms).toISOString() : '–');
    box.append(el('h2', {}, 'Head block'), table(['Number of series', 'Number of chunks', 'Number of label pairs', 'Current min time', 'Current max time'],
      [[String(h.numSeries), String(h.chunkCount), String(h.numLabelPairs ?? ''), t(h.minTime), t(h.maxTime)]]));
    for (const [key, title] of [['seriesCountByMetricName', 'Top 10 series count by metric names'],
      ['labelValueCountByLabelName', 'Top 10 label names with value count'],
      ['memoryInBytesByLabelName', 'Top 10 label names with high memory usage'],
      ['seriesCountByLabelValuePair', 'Top 10 series count by label value pairs']]) {
      box.append(el('h2', {}, title), table(['Name', 'Count'], (d[key] || []).map((x) => [x.name, String(x.value)])));
    }
  });
  main.append(el('h2', {}, 'Blocks, WAL and compactions'));
  const box = el('div', {class: 'content'}, el('div', {class: 'empty'}, 'Loading…'));
  main.append(box);
  // the store's own statistics, from inferdb's /metrics page (Prometheus' names)
  const stats = fetch('metrics').then((r) => (r.ok ? r.text() : Promise.reject(new Error(`HTTP ${r.status}`)))).then((text) => {
    const rows = text.split('\n').filter((l) => l.startsWith('prometheus_tsdb_'))
      .map((l) => { const k = l.lastIndexOf(' '); return [l.slice(0, k), l.slice(k + 1)]; })
      .filter(([k]) => !/_(bucket|sum|count)($|\{)/.test(k))
      .map(([k, v]) => [k, /_time$/.test(k) && Number(v) > 1e11 ? `${v} (${new Date(Number(v)).toISOString()})` : v]);
    box.replaceChildren(rows.length ? table(['Statistic (inferdb /metrics)', 'Value'], rows) :
      el('div', {class: 'empty'}, 'No prometheus_tsdb_* statistics on /metrics.'));
  }).catch((e) => box.replaceChildren(notice('error', `Error loading metrics: ${e.message}`)));
  return Promise.all([head, stats]);
}

function config(main) {
  main.append(heading('Configuration', 'The configuration file as loaded.'));
  return load(main, 'api/v1/status/config', {}, (box, d) => {
    const pre = el('pre', {class: 'config'}, d.yaml || '# no configuration file: built-in defaults and command-line flags');
    box.append(el('button', {onclick: () => navigator.clipboard && navigator.clipboard.writeText(d.yaml)}, 'Copy to clipboard'), pre);
  });
}

function flags(main) {
  main.append(heading('Command-line flags'));
  let text = '';
  return load(main, 'api/v1/status/flags', {}, (box, d) => {
    const host = el('div');
    const draw = () => host.replaceChildren(table(['Flag', 'Value'], Object.entries(d)
      .filter(([k, v]) => !text || k.toLowerCase().includes(text) || String(v).toLowerCase().includes(text))
      .map(([k, v]) => [el('code', {}, '--' + k), String(v)])));
    box.append(filterInput('Filter flags', (v) => { text = v; draw(); }), host);
    draw();
  });
}

function status(main) {
  main.append(heading('Runtime and build information'));
  const kv = (d) => table(['Name', 'Value'], Object.entries(d).map(([k, v]) => [k, String(v)]));
  main.append(el('h2', {}, 'Runtime information'));
  const a = load(main, 'api/v1/status/runtimeinfo', {}, (box, d) => box.append(kv(d)));
  main.append(el('h2', {}, 'Build information'));
  const b = load(main, 'api/v1/status/buildinfo', {}, (box, d) => box.append(kv(d)));
  return Promise.all([a, b]);
}

export const PAGES = {
  targets, 'service-discovery': serviceDiscovery, rules, alerts, 'tsdb-status': tsdbStatus, config, flags, status,
};
