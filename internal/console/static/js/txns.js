// The transactions in flight: agent, fence, reads, writes, and the lease
// counting down (from the server's clock, not the browser's).
import { get, skew } from './api.js';
import { h, empty } from './dom.js';
import { every } from './live.js';

export default function txnsView(root) {
  const body = h('div.card');
  root.append(h('h2', 'Transactions in flight'), body);
  let rows = [];
  let offset = 0;
  let granted = new Map(); // txn → the longest lease seen, for the bar

  const stopPoll = every(2000, async () => {
    const d = await get('txns');
    offset = skew(d.now);
    rows = d.txns;
    render();
  });

  function render() {
    if (!rows.length) {
      body.replaceChildren(empty('No transaction is in flight.'));
      return;
    }
    body.replaceChildren(h('table', h('thead', h('tr', ['transaction', 'agent', 'fence', 'lease', 'writes', 'reads'].map((t) => h('th', t)))),
      h('tbody', rows.map((t) => h('tr.txn', { dataset: { txn: t.txn, agent: t.agent } },
        h('td.mono', t.txn),
        h('td', t.agent),
        h('td.fence', t.fence == null ? '–' : String(t.fence)),
        h('td', h('span.countdown', { dataset: { expires: t.lease_expires } }), h('div.lease', h('div'))),
        h('td', (t.writes || []).map((w) => h('div.mono', `${w.op} ${w.path}`, w.value !== undefined ? ` = ${JSON.stringify(w.value)}` : ''))),
        h('td', (t.reads || []).map((r) => h('div.mono', r.path, r.version != null ? ` @v${r.version}` : ''))))))));
    tick();
  }

  // tick redraws the countdowns, ten times a second.
  function tick() {
    const now = Date.now() + offset;
    for (const el of body.querySelectorAll('.countdown')) {
      const left = Date.parse(el.dataset.expires) - now;
      const txn = el.closest('tr').dataset.txn;
      const full = Math.max(granted.get(txn) || 0, left);
      granted.set(txn, full);
      el.textContent = left > 0 ? `${(left / 1000).toFixed(1)} s left` : 'expiring';
      el.dataset.ms = Math.max(0, Math.round(left));
      const bar = el.nextElementSibling;
      bar.classList.toggle('low', left < 5000);
      bar.firstElementChild.style.width = `${full > 0 ? Math.max(0, (100 * left) / full) : 0}%`;
    }
  }
  const timer = setInterval(tick, 100);
  return () => { stopPoll(); clearInterval(timer); };
}
