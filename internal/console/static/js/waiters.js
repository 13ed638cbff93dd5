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

// draw places the agents on a circle and one arrow for each agent that
// waits on another, labelled with the paths it waits on. Labels must not
// cover each other nor the agents: several waits between one pair are one
// arrow with a line per path, an arrow that has a reverse is set apart
// from it, and a label that would overlap one already placed moves out
// along its arrow's normal (opposite agents' arrows all cross the centre).
function draw(g) {
  const w = 460, hgt = 320, r = 120, cx = w / 2, cy = hgt / 2, nodeR = 26, lineH = 14, charW = 6.6;
  const pos = new Map(g.agents.map((a, i) => {
    const t = (2 * Math.PI * i) / g.agents.length - Math.PI / 2;
    return [a, [cx + r * Math.cos(t), cy + r * Math.sin(t)]];
  }));
  const pairs = new Map();
  for (const e of g.edges) {
    const key = e.from + '\u0000' + e.to;
    if (!pairs.has(key)) pairs.set(key, { from: e.from, to: e.to, edges: [] });
    pairs.get(key).edges.push(e);
  }
  // Boxes already taken: the agents first, then each label placed.
  const taken = g.agents.map((a) => { const [x, y] = pos.get(a); return [x - nodeR, y - nodeR, x + nodeR, y + nodeR]; });
  const hits = (b) => taken.some((o) => b[0] < o[2] && o[0] < b[2] && b[1] < o[3] && o[1] < b[3]);
  const edges = [...pairs.values()].map((p) => {
    let [x1, y1] = pos.get(p.from), [x2, y2] = pos.get(p.to);
    const len = Math.hypot(x2 - x1, y2 - y1) || 1;
    const ux = (x2 - x1) / len, uy = (y2 - y1) / len, pad = 30;
    // The normal on the arrow's left as it points.
    const nx = uy, ny = -ux;
    if (pairs.has(p.to + '\u0000' + p.from)) {
      x1 += nx * 6; y1 += ny * 6; x2 += nx * 6; y2 += ny * 6;
    }
    const escalated = p.edges.every((e) => e.escalated);
    const paths = [...new Set(p.edges.map((e) => e.path))];
    const lines = paths.length > 3 ? [...paths.slice(0, 2), `+${paths.length - 2} more`] : paths;
    const bw = Math.max(...lines.map((l) => l.length)) * charW, bh = lines.length * lineH;
    const anchor = nx > 0.3 ? 'start' : nx < -0.3 ? 'end' : 'middle';
    const box = (lx, ly) => {
      const left = anchor === 'start' ? lx : anchor === 'end' ? lx - bw : lx - bw / 2;
      return [left, ly - lineH + 3, left + bw, ly - lineH + 3 + bh];
    };
    // From the arrow's middle, on its left; out along the normal, then
    // along the arrow, until the label is clear.
    let lx = (x1 + x2) / 2 + nx * 12, ly = (y1 + y2) / 2 + ny * 12 + (ny < 0 ? -(bh - lineH) : lineH / 2);
    for (let step = 0; step < 24 && hits(box(lx, ly)); step++) {
      const along = step % 2 ? ((step + 1) / 2) * 10 : 0;
      lx += nx * 6 + (step % 2 ? ux * along : 0);
      ly += ny * 6 + (step % 2 ? uy * along : 0);
    }
    taken.push(box(lx, ly));
    const label = h('text', { x: lx, y: ly, 'text-anchor': anchor, fill: '#677386' },
      lines.map((l, i) => h('tspan', { x: lx, dy: i ? lineH : 0 }, l)));
    return h('g.edge', { dataset: { from: p.from, to: p.to } },
      h('title', p.edges.map((e) => `${e.from} waits on ${e.to}'s ${e.txn} (${e.kind} on ${e.path})`).join('\n')),
      h('line', { x1: x1 + ux * pad, y1: y1 + uy * pad, x2: x2 - ux * pad, y2: y2 - uy * pad, stroke: escalated ? '#b86e00' : '#2f6fd6',
        'stroke-width': 2, 'stroke-dasharray': escalated ? '6 4' : null, 'marker-end': 'url(#arrow)' }),
      label);
  });
  const nodes = g.agents.map((a) => {
    const [x, y] = pos.get(a);
    return h('g.agent', { dataset: { agent: a } }, h('circle', { cx: x, cy: y, r: nodeR, fill: '#fff', stroke: '#1d2430', 'stroke-width': 1.5 }),
      h('text', { x, y: y + 4, 'text-anchor': 'middle' }, a));
  });
  return h('svg#waitgraph', { viewBox: `0 0 ${w} ${hgt}`, width: '100%', role: 'img', 'aria-label': 'wait-for graph' },
    h('defs', h('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      h('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#1d2430' }))),
    edges, nodes);
}
