// The arbiter queue (cases waiting for an arbiter, or held by one) and the
// dead letters (cases no arbiter settled by their deadline), each with its
// intents and the state of the paths involved.
import { get } from './api.js';
import { h, badge, empty, clock, json } from './dom.js';
import { every } from './live.js';

export default function arbiterView(root) {
  const queue = h('div#queue');
  const dead = h('div#dlq');
  root.append(h('h2', 'Arbiter queue'), queue, h('h2', { style: 'margin-top:1.2rem' }, 'Dead letters'), dead);
  return every(3000, async () => {
    const d = await get('arbiter');
    queue.replaceChildren(...cases(d.queue, true));
    dead.replaceChildren(...cases(d.dead_letters, false));
  });
}

function cases(q, live) {
  if (!q.cases.length) return [h('div.card', empty(live ? 'No case waits for an arbiter.' : 'No dead letter.'))];
  return q.cases.map((row) => {
    const c = row.case;
    const esc = (c.intents || []).find((i) => i && i.id === c.id);
    return h('div.card.case', { dataset: { case: c.id } },
      h('div', live ? badge(row.held ? 'held by an arbiter' : 'waiting for an arbiter', row.held ? 'granted' : 'escalated') : badge('dead letter', 'rejected'),
        ' case ', h('a.intent', { href: '#story/' + c.id }, c.id), esc ? ` from ${esc.agent}` : '',
        h('span.muted', `  deadline ${clock(c.deadline)}`)),
      h('h3', 'intents'),
      h('table', h('tbody', (c.intents || []).map((i) => h('tr',
        h('td', i.id === c.id ? badge('escalated') : badge('holder', 'granted')), h('td', i.agent), h('td.mono', i.id),
        h('td', `${i.kind}${i.action ? ' ' + i.action : ''}`),
        h('td.mono', (i.writes || []).map((w) => `${w.op} ${w.path}${w.value !== undefined ? ' = ' + json(w.value, 40) : ''}`).join(', ')))))),
      c.holder ? h('div.muted', `in flight: ${c.holder.agent}'s ${c.holder.txn}, fence ${c.holder.fence}`) : null,
      h('h3', 'conflicts'),
      (c.conflicts || []).map((x) => h('div', `${x.kind} on `, h('span.path', x.path), ` with ${x.with_agent || '?'}`)),
      h('h3', 'state when the case opened'),
      h('table', h('tbody', Object.entries(c.state || {}).map(([p, s]) => h('tr', h('td.path', p),
        h('td.mono', s.exists ? json(s.value, 60) : 'absent'), h('td.muted', `v${s.version}`))))));
  });
}
