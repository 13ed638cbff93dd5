// Where conflicts happen: by board, by document (a deeper path prefix) and
// by pair of agents, as `coagent conflicts top` shows them.
import { get } from './api.js';
import { h, empty } from './dom.js';
import { every } from './live.js';

export default function conflictsView(root) {
  const boards = h('div.card'), docs = h('div.card'), pairs = h('div.card');
  root.append(h('h2', 'Conflict hotspots'), h('h3', 'Boards'), boards, h('h3', 'Documents'), docs, h('h3', 'Pairs of agents'), pairs);
  return every(5000, async () => {
    const { spots } = await get('conflicts');
    const isPair = (s) => s.kind === 'pair';
    fill(boards, spots.filter((s) => !isPair(s) && !s.name.includes('.')), 'board');
    fill(docs, spots.filter((s) => !isPair(s) && s.name.includes('.')), 'document');
    fill(pairs, spots.filter(isPair), 'agents');
  });
}

function fill(el, spots, label) {
  if (!spots.length) {
    el.replaceChildren(empty('No conflict yet.'));
    return;
  }
  const max = Math.max(...spots.map((s) => s.total), 1);
  el.replaceChildren(h('table', h('thead', h('tr', [label, 'last minute', 'total', '', 'merges', 'waits', 'escalations', 'by kind'].map((t) => h('th', t)))),
    h('tbody', spots.map((s) => h('tr.spot', { dataset: { name: s.name, kind: s.kind } },
      h('td.path', s.name), h('td', String(s.last_minute)), h('td', String(s.total)),
      h('td', h('div.lease', { style: 'width:10rem' }, h('div', { style: `width:${(100 * s.total) / max}%;background:var(--warn)` }))),
      h('td', String(s.merges || 0)), h('td', String(s.waits || 0)), h('td', String(s.escalations || 0)),
      h('td.muted', Object.entries(s.conflicts || {}).map(([k, n]) => `${k} ${n}`).join(', ')))))));
}
