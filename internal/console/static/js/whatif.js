// What if: the log decided again under a rules file the page is given,
// as `coagent whatif` decides it: the matrix of recorded × new decisions,
// the changes by rule, board and agent, and the divergences, each opening
// its intent's story.
import { post } from './api.js';
import { h, empty } from './dom.js';
import { showError } from './live.js';

export default function whatifView(root) {
  const rules = h('textarea#whatif-rules', { rows: 10, cols: 80, spellcheck: 'false', placeholder: '{"rules":[{"pattern":"docs.**","writers":["role:writer"]}]}' });
  const file = h('input#whatif-file', { type: 'file', accept: '.json,application/json' });
  const cascade = h('input#whatif-cascade', { type: 'checkbox' });
  const from = h('input#whatif-from', { type: 'number', min: 0, placeholder: 'first', size: 8 });
  const until = h('input#whatif-until', { type: 'number', min: 0, placeholder: 'last', size: 8 });
  const out = h('div#whatif', empty('Give a rules file: the log is decided again under it, and every decision that would change is shown.'));
  file.addEventListener('change', async () => {
    if (file.files.length) rules.value = await file.files[0].text();
  });
  const go = h('button#whatif-go', { onclick: () => run() }, 'Decide again');
  root.append(h('h2', 'What if'), h('div.card', rules, h('div.toolbar', 'or load ', file),
    h('div.toolbar', h('label', cascade, ' cascade (the recorded intents fed to the new rules alone)'), ' from ', from, ' until ', until, go)), out);

  async function run() {
    let doc;
    try {
      doc = JSON.parse(rules.value);
    } catch (e) {
      showError(new Error('the rules file is not JSON: ' + e.message));
      return;
    }
    go.disabled = true;
    out.replaceChildren(empty('Reading the log and deciding it again…'));
    try {
      const a = await post('whatif', { rules: doc, cascade: cascade.checked, from: Number(from.value) || 0, until: Number(until.value) || 0, top: 50 });
      out.replaceChildren(...report(a.report, a.error));
      showError(null);
    } catch (e) {
      out.replaceChildren(empty('—'));
      showError(e);
    } finally {
      go.disabled = false;
    }
  }
}

function report(r, problem) {
  const parts = [h('p#whatif-summary', `Events ${r.from}–${r.until} (${r.intents} intents) decided again, ${r.mode}: `,
    r.changed ? h('b', `${r.changed} change`) : h('b', 'no decision changes'),
    r.changed ? `; the first divergence is at event ${r.first_divergence}.` : '.')];
  if (problem) parts.push(h('p.warn', problem));
  const rows = [];
  for (const rec of Object.keys(r.matrix).sort()) {
    for (const nw of Object.keys(r.matrix[rec]).sort()) {
      rows.push(h('tr', { class: rec === nw ? '' : 'changed' }, h('td', rec), h('td', nw), h('td', String(r.matrix[rec][nw])), h('td', rec === nw ? '' : 'changed')));
    }
  }
  parts.push(h('h3', 'Recorded → new'), h('div.card', h('table#whatif-matrix', h('thead', h('tr', ['recorded', 'new', 'intents', ''].map((t) => h('th', t)))), h('tbody', rows))));
  const counts = (title, m) => {
    const keys = Object.keys(m || {}).sort();
    return keys.length ? h('p', h('b', title + ': '), keys.map((k) => `${k} ${m[k]}`).join(', ')) : null;
  };
  if (r.changed) {
    parts.push(counts('changed by rule', r.by_rule), counts('changed by board', r.by_board), counts('changed by agent', r.by_agent));
    parts.push(h('h3', `Divergences (the first ${r.top.length})`), h('ol#whatif-top', r.top.map((d) => h('li.divergence', { dataset: { intent: d.intent } },
      h('div', `event ${d.seq} `, h('a', { href: '#story/' + d.intent }, d.intent), ` of ${d.agent}`, d.rule ? ` — ${d.rule}` : ''),
      h('div.muted', `recorded ${key(d.recorded)}${d.recorded.detail ? ': ' + d.recorded.detail : ''}`),
      h('div', `new ${key(d.new)}${d.new.detail ? ': ' + d.new.detail : ''}`)))));
  }
  if ((r.invariants_broken || []).length) {
    parts.push(h('h3', 'Invariants of the new rules the recorded history breaks'), h('ul#whatif-broken', r.invariants_broken.map((b) =>
      h('li', h('b', b.invariant), ` first after event ${b.first}, after ${b.changes} changes in all: ${b.detail}`))));
  }
  parts.push(h('p.muted', r.mode === 'isolated' ? `state sha256 ${r.recorded_sha256} (the history is the recorded one)`
    : `state: recorded sha256 ${r.recorded_sha256}, new ${r.new_sha256}${(r.paths_differ || []).length ? '; paths that differ: ' + r.paths_differ.join(', ') : ''}`));
  return parts.filter(Boolean);
}

function key(d) {
  if (!d.outcome) return 'none';
  return d.reason ? `${d.outcome}:${d.reason}` : d.outcome;
}
