// The query page's explain tab: the expression's syntax tree from api/v1/parse_query (Prometheus 3's
// JSON shape), each node printed back as PromQL, described, and evaluated for the series it returns.

import {el, api, formatDuration} from './util.js';
const LEGACY_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LEGACY_LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const quote = (s) => JSON.stringify(String(s));
const labelName = (l) => (LEGACY_LABEL.test(l) ? l : quote(l));
const labelList = (ls) => `(${ls.map(labelName).join(', ')})`;

function modifiers(n) {
  let s = '';
  if (n.offset) s += ` offset ${n.offset < 0 ? '-' : ''}${formatDuration(Math.abs(n.offset) / 1000)}`;
  if (n.timestamp !== null && n.timestamp !== undefined) s += ` @ ${(n.timestamp / 1000).toFixed(3)}`;
  else if (n.startOrEnd) s += ` @ ${n.startOrEnd}()`;
  return s;
}

function selectorText(n) {
  const ms = n.matchers.filter((m) => !(n.name && m.name === '__name__' && m.type === '=' && m.value === n.name));
  const inner = ms.map((m) => `${labelName(m.name)}${m.type}${quote(m.value)}`);
  let head = n.name;
  if (n.name && !LEGACY_NAME.test(n.name)) {
    head = '';
    inner.unshift(quote(n.name));
  }
  return head + (inner.length || !head ? `{${inner.join(', ')}}` : '');
}

/** PromQL text of a parse_query node (Prometheus' printer, as its UI's tree view does). */
export function nodeText(n) {
  switch (n.type) {
    case 'aggregation': {
      let g = '';
      if (n.without || n.grouping.length) g = ` ${n.without ? 'without' : 'by'} ${labelList(n.grouping)} `;
      return `${n.op}${g}(${n.param ? nodeText(n.param) + ', ' : ''}${nodeText(n.expr)})`;
    }
    case 'binaryExpr': {
      let mod = n.bool ? ' bool' : '';
      const m = n.matching;
      if (m && (m.on || m.labels.length)) mod += ` ${m.on ? 'on' : 'ignoring'}${labelList(m.labels)}`;
      if (m && (m.card === 'many-to-one' || m.card === 'one-to-many')) {
        mod += ` ${m.card === 'many-to-one' ? 'group_left' : 'group_right'}${m.include.length ? labelList(m.include) : ''}`;
      }
      return `${nodeText(n.lhs)} ${n.op}${mod} ${nodeText(n.rhs)}`;
    }
    case 'call': return `${n.func.name}(${n.args.map(nodeText).join(', ')})`;
    case 'matrixSelector': return `${selectorText(n)}[${formatDuration(n.range / 1000)}]${modifiers(n)}`;
    case 'vectorSelector': return selectorText(n) + modifiers(n);
    case 'subquery':
      return `${nodeText(n.expr)}[${formatDuration(n.range / 1000)}:${n.step ? formatDuration(n.step / 1000) : ''}]${modifiers(n)}`;
    case 'numberLiteral': return n.val;
    case 'stringLiteral': return quote(n.val);
    case 'parenExpr': return `(${nodeText(n.expr)})`;
    case 'unaryExpr': return `${n.op}${nodeText(n.expr)}`;
    default: return '';
  }
}

/** The children of a parse_query node. */
export function nodeChildren(n) {
  switch (n.type) {
    case 'aggregation': return n.param ? [n.param, n.expr] : [n.expr];
    case 'binaryExpr': return [n.lhs, n.rhs];
    case 'call': return n.args;
    case 'subquery': case 'parenExpr': case 'unaryExpr': return [n.expr];
    default: return [];
  }
}

/** What a node is, in a few words: 'aggregation sum by (model_name)', 'call rate → vector'. */
function nodeSummary(n) {
  switch (n.type) {
    case 'aggregation':
      return `aggregation ${n.op}` + (n.without || n.grouping.length ? ` ${n.without ? 'without' : 'by'} ${labelList(n.grouping)}` : '');
    case 'binaryExpr': {
      const m = n.matching;
      return `binary ${n.op}${n.bool ? ' bool' : ''}` + (m ? `, ${m.card} matching` +
        (m.on || m.labels.length ? ` ${m.on ? 'on' : 'ignoring'} ${labelList(m.labels)}` : '') : ', with a scalar');
    }
    case 'call': return `function ${n.func.name}(${n.func.argTypes.join(', ')}${n.func.variadic < 0 ? ', …' : ''}) → ${n.func.returnType}`;
    case 'matrixSelector': return `range selector over ${formatDuration(n.range / 1000)}`;
    case 'vectorSelector': return 'instant selector';
    case 'subquery': return `subquery over ${formatDuration(n.range / 1000)}, step ${n.step ? formatDuration(n.step / 1000) : 'default'}`;
    case 'numberLiteral': return 'number';
    case 'stringLiteral': return 'string';
    case 'parenExpr': return 'parentheses';
    case 'unaryExpr': return `unary ${n.op}`;
    default: return n.type;
  }
}

const MAX_EVALUATED = 64;

/**
 * Draws the tree of `ast` into `out`; each node but literals is evaluated at `time`
 * (seconds) and shows the number of series it returns (or its scalar, or its error).
 * Resolves once every node's answer is shown.
 */
export function renderTree(out, ast, time, signal) {
  const jobs = [];
  const build = (n, depth) => {
    const text = nodeText(n);
    const result = el('span', {class: 'ast-result'});
    const detail = [];
    if (n.type === 'vectorSelector' || n.type === 'matrixSelector') {
      detail.push(el('span', {class: 'ast-matchers'}, n.matchers.map((m) =>
        el('span', {class: 'badge'}, `${labelName(m.name)}${m.type}${quote(m.value)}`))));
      if (n.offset || n.startOrEnd || (n.timestamp !== null && n.timestamp !== undefined)) {
        detail.push(el('span', {class: 'ast-mod'}, modifiers(n).trim()));
      }
    }
    const literal = n.type === 'numberLiteral' || n.type === 'stringLiteral';
    if (!literal && jobs.length < MAX_EVALUATED) {
      jobs.push(evaluateNode(text, time, signal, result));
    } else if (!literal) {
      result.textContent = 'not evaluated (too many nodes)';
    }
    const kids = nodeChildren(n);
    return el('li', {class: 'ast-node', 'data-type': n.type, 'data-depth': String(depth)},
      el('div', {class: 'ast-line'},
        el('code', {class: 'ast-text'}, text),
        el('span', {class: 'ast-type'}, nodeSummary(n)), detail, result),
      kids.length ? el('ul', {class: 'ast'}, kids.map((k) => build(k, depth + 1))) : null);
  };
  out.append(el('ul', {class: 'ast ast-root'}, build(ast, 0)));
  return Promise.all(jobs);
}

async function evaluateNode(text, time, signal, box) {
  const t0 = performance.now();
  try {
    const env = await api('api/v1/query', {query: text, time}, {post: true, signal});
    const {resultType, result} = env.data;
    const ms = Math.round(performance.now() - t0);
    if (resultType === 'scalar' || resultType === 'string') {
      box.textContent = `${resultType} ${result[1]} · ${ms} ms`;
      return;
    }
    const names = new Set();
    for (const s of result) for (const k of Object.keys(s.metric)) if (k !== '__name__') names.add(k);
    const labels = [...names].sort();
    box.dataset.series = String(result.length);
    box.textContent = `${result.length} ${resultType === 'matrix' ? 'range series' : 'series'}` +
      (labels.length ? ` · labels: ${labels.slice(0, 8).join(', ')}${labels.length > 8 ? ', …' : ''}` : '') + ` · ${ms} ms`;
  } catch (e) {
    if (e.name === 'AbortError') return;
    box.classList.add('ast-error');
    box.textContent = `error: ${e.message}`;
  }
}
