// The console's shell: the summary line, the tabs, and one view at a time
// (the part of the address after #).
import { get } from './api.js';
import { whoami, mayVote } from './me.js';
import { h } from './dom.js';
import { showError } from './live.js';
import stateView from './state.js';
import txnsView from './txns.js';
import boardView from './board.js';
import waitersView from './waiters.js';
import arbiterView from './arbiter.js';
import conflictsView from './conflicts.js';
import eventsView from './events.js';
import storyView from './story.js';
import whatifView from './whatif.js';

const views = { state: stateView, txns: txnsView, board: boardView, waiters: waitersView, arbiter: arbiterView,
  conflicts: conflictsView, events: eventsView, story: storyView, whatif: whatifView };

const main = document.getElementById('view');
let unmount = null;

function route() {
  const [name, arg] = decodeURIComponent(location.hash.slice(1)).split('/');
  const view = views[name] ? name : 'state';
  if (unmount) unmount();
  main.replaceChildren();
  showError(null);
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.getAttribute('href') === '#' + view);
  document.body.dataset.view = view;
  unmount = views[view](main, arg) || null;
}

async function summary() {
  const o = await get('overview');
  const item = (label, n, href) => h('a', { href, style: 'color:inherit;text-decoration:none' }, label, ' ', h('b', String(n)));
  const items = [item('rev', o.rev, '#state'), item('in flight', o.txns, '#txns'), item('waiting', o.waiters, '#waiters'),
    item('arbiter queue', o.arbiter_queue, '#arbiter'), item('dead letters', o.dead_letters, '#arbiter')];
  if (o.rules && o.rules.hash) items.push(h('span', 'rules ', h('b', String(o.rules.hash).slice(0, 12))));
  // A sharded deployment: this coordinator's shard, and where its boards went.
  const away = Object.entries(o.owners || {}).filter(([, s]) => s !== o.shard);
  if (o.shard && (o.shard !== 'default' || away.length)) {
    items.push(h('span#shard', { title: away.map(([b, s]) => `${b} → shard ${s}`).join('\n') }, 'shard ', h('b', o.shard),
      away.length ? ` (${away.length} board${away.length === 1 ? '' : 's'} elsewhere)` : ''));
  }
  // An open case waiting for this person shows from every view.
  const me = await whoami();
  if (me.agent && !me.read_only) {
    const { cases } = await get('cases');
    const mine = cases.filter((r) => r.case && r.case.approval && mayVote(r.case, me.agent, me.roles || []));
    if (mine.length) items.push(h('a#for-you', { href: '#arbiter' }, h('b', String(mine.length)), mine.length === 1 ? ' case waits for you' : ' cases wait for you'));
  }
  items.push(h('span#who', me.known ? (me.read_only ? `read-only as ${me.agent || 'the operator'}` : `acting as ${me.agent}`) : (me.agent ? `acting as ${me.agent}` : 'not acting')));
  document.getElementById('summary').replaceChildren(...items);
}

window.addEventListener('hashchange', route);
route();
(async function loop() {
  try { await summary(); } catch (e) { /* the view shows the failure */ }
  setTimeout(loop, 3000);
})();
