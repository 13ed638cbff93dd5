// The task board: a column per lane (a task rule with a lease), a card per
// task with its status, owner, priority, tries (and whether it is a dead
// letter), pending effects, and its claim's
// lease counting down (from the server's clock, not the browser's).
import { get, skew } from './api.js';
import { h, empty } from './dom.js';
import { every } from './live.js';

export default function boardView(root) {
  const body = h('div#board');
  root.append(h('h2', 'Task board'), body);
  let lanes = [];
  let offset = 0;

  const stopPoll = every(2000, async () => {
    const d = await get('board');
    offset = skew(d.now);
    lanes = d.lanes;
    render();
  });

  function card(t) {
    return h('div.task', { dataset: { task: t.task, owner: t.owner || '' } },
      h('div.name.mono', t.name),
      h('div.status', t.status == null ? '–' : String(t.status)),
      t.owner ? h('div.owner', 'owner ', h('b', t.owner)) : h('div.owner.free', 'unclaimed'),
      t.priority != null ? h('div.priority', `priority ${t.priority}`) : null,
      t.txn ? h('div', h('span.countdown', { dataset: { expires: t.lease_expires } })) : null,
      t.tries != null ? h('div.tries', `tries ${t.tries}`) : null,
      t.dead ? h('div.dead', 'dead letter: coagent dlq retry') : null,
      (t.pending_effects || []).length ? h('div.pending', `to reconcile: ${t.pending_effects.join(', ')}`) : null);
  }

  function render() {
    if (!lanes.length) {
      body.replaceChildren(empty('No lane: a task rule with a lease ({"pattern": "tasks.*", "kind": "task", "lease": "30s"}) makes one.'));
      return;
    }
    body.replaceChildren(...lanes.map((l) => h('section.lane', { dataset: { lane: l.lane } },
      h('h3.mono', l.lane, ' ', h('span.count', `${l.tasks.length}`)),
      l.tasks.length ? l.tasks.map(card) : empty('No task.'))));
    tick();
  }

  // tick redraws the countdowns, ten times a second.
  function tick() {
    const now = Date.now() + offset;
    for (const el of body.querySelectorAll('.countdown')) {
      const left = Date.parse(el.dataset.expires) - now;
      el.textContent = left > 0 ? `lease ${(left / 1000).toFixed(1)} s` : 'lease ending';
      el.dataset.ms = Math.max(0, Math.round(left));
      el.classList.toggle('low', left < 5000);
    }
  }
  const timer = setInterval(tick, 100);
  return () => { stopPoll(); clearInterval(timer); };
}
