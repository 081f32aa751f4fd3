// The UI's entry: the navigation bar, then the page the shell names (body[data-page]).

import {el, notice, ready} from './util.js';
import * as query from './query.js';
import * as fleet from './fleet.js';
import * as insights from './insights.js';
import {PAGES} from './status.js';

const NAV = [
  ['fleet', 'Fleet'],
  ['insights', 'Insights'],
  ['query', 'Query'],
  ['alerts', 'Alerts'],
  ['rules', 'Rules'],
  ['targets', 'Targets'],
  ['service-discovery', 'Service discovery'],
  ['tsdb-status', 'TSDB status'],
  ['config', 'Configuration'],
  ['flags', 'Flags'],
  ['status', 'Status'],
];

function main() {
  const page = document.body.dataset.page;
  document.body.prepend(el('nav', {class: 'top'},
    el('a', {class: 'brand', href: 'fleet'}, 'inferdb'),
    NAV.map(([p, t]) => el('a', {href: p, class: p === page ? 'active' : '', 'aria-current': p === page ? 'page' : false}, t))));
  const root = document.getElementById('main');
  try {
    let done;
    if (page === 'query') done = query.render(root).loaded;
    else if (page === 'fleet') done = fleet.render(root).loaded;
    else if (page === 'insights') done = insights.render(root).loaded;
    else if (PAGES[page]) done = PAGES[page](root);
    else root.append(notice('error', `Unknown page ${page}`));
    Promise.resolve(done).then(ready);
  } catch (e) {
    root.append(notice('error', `This page failed: ${e.message}`));
    throw e;
  }
}

main();
