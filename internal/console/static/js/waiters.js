// The parked intents and the agents' wait-for graph: an arrow from an
// agent to the agent whose transaction it waits on (dashed: it waits on
// an arbiter's settlement of its case).
import { get } from './api.js';
import { h, badge, empty, clock } from './dom.js';
import { every } from './live.js';

export default function waitersView(root) {
  const list = h('div.card');
  const graph = h('div.card');
  root.append(h('div.split', h('div', h('h2', 'Parked intents'), list), h('div', h('h2', 'Wait-for graph'), graph)));
  return every(2000, async () => {
    const d = await get('waiters');
    list.replaceChildren(d.waiters.length ? h('ul#waiters', { style: 'list-style:none;padding:0;margin:0' }, d.waiters.map((w) =>
      h('li.waiter', { dataset: { intent: w.intent, agent: w.agent }, style: 'padding:.4rem 0;border-bottom:1px solid var(--line)' },
        h('div', badge(w.type === 'escalate' ? 'escalated' : 'waiting', w.type), ' ', h('b', w.agent), ' ',
          h('a.intent', { href: '#story/' + w.intent }, w.intent), ' ', w.kind || '', w.action ? ` ${w.action}` : ''),
        h('div.muted', (w.writes || []).map((x) => `${x.op} ${x.path}`).join(', ')),
        w.conflicts.map((c) => h('div', `${c.kind} on `, h('span.path', c.path), ` with ${c.with_agent || '?'}'s `, h('span.mono', c.with_txn || ''))),
        w.deadline ? h('div.muted', `until ${clock(w.deadline)}`) : null))) : empty('No intent is waiting.'));
    graph.replaceChildren(d.graph.edges.length ? draw(d.graph) : empty('Nobody waits on anybody.'));
  });
}

// draw places the agents on a circle and an arrow for each edge.
function draw(g) {
  const w = 460, hgt = 320, r = 120, cx = w / 2, cy = hgt / 2;
  const pos = new Map(g.agents.map((a, i) => {
    const t = (2 * Math.PI * i) / g.agents.length - Math.PI / 2;
    return [a, [cx + r * Math.cos(t), cy + r * Math.sin(t)]];
  }));
  const edges = g.edges.map((e) => {
    const [x1, y1] = pos.get(e.from), [x2, y2] = pos.get(e.to);
    const len = Math.hypot(x2 - x1, y2 - y1) || 1;
    const ux = (x2 - x1) / len, uy = (y2 - y1) / len, pad = 30;
    return h('g.edge', { dataset: { from: e.from, to: e.to } },
      h('title', `${e.from} waits on ${e.to}'s ${e.txn} (${e.kind} on ${e.path})`),
      h('line', { x1: x1 + ux * pad, y1: y1 + uy * pad, x2: x2 - ux * pad, y2: y2 - uy * pad, stroke: e.escalated ? '#b86e00' : '#2f6fd6',
        'stroke-width': 2, 'stroke-dasharray': e.escalated ? '6 4' : null, 'marker-end': 'url(#arrow)' }),
      // The label beside the arrow, on its left as it points.
      h('text', { x: (x1 + x2) / 2 + uy * 14, y: (y1 + y2) / 2 - ux * 14, 'text-anchor': 'middle', fill: '#677386' }, e.path));
  });
  const nodes = g.agents.map((a) => {
    const [x, y] = pos.get(a);
    return h('g.agent', { dataset: { agent: a } }, h('circle', { cx: x, cy: y, r: 26, fill: '#fff', stroke: '#1d2430', 'stroke-width': 1.5 }),
      h('text', { x, y: y + 4, 'text-anchor': 'middle' }, a));
  });
  return h('svg#waitgraph', { viewBox: `0 0 ${w} ${hgt}`, width: '100%', role: 'img', 'aria-label': 'wait-for graph' },
    h('defs', h('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      h('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#1d2430' }))),
    edges, nodes);
}
