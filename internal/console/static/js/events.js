// The event feed: the log's recent events, then the coordinator's events as
// they happen (server-sent events from <prefix>.events.>), filtered by
// agent, path and type.
import { feed } from './api.js';
import { h, empty } from './dom.js';
import { eventRow } from './eventrow.js';

const types = ['', 'intent', 'decision', 'change', 'grant', 'renew', 'expire', 'release', 'wait', 'escalate', 'notice', 'resolve', 'rules'];
const keep = 500;

export default function eventsView(root) {
  const agent = h('input#f-agent', { placeholder: 'agent', size: 10 });
  const path = h('input#f-path', { placeholder: 'path (and under it)', size: 22 });
  const type = h('select#f-type', types.map((t) => h('option', { value: t }, t || 'every type')));
  const status = h('span#feed-status.muted', 'connecting…');
  const pause = h('button.plain', { onclick: () => { paused = !paused; pause.textContent = paused ? 'Resume' : 'Pause'; } }, 'Pause');
  const list = h('ol#feed.events');
  const card = h('div.card', empty('Waiting for the next event…'));
  let paused = false;
  let close = null;
  root.append(h('div.toolbar', agent, path, type, h('button', { onclick: open }, 'Filter'), pause, status), card);
  for (const el of [agent, path]) el.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
  type.addEventListener('change', open);

  function open() {
    if (close) close();
    list.replaceChildren();
    card.replaceChildren(empty('Waiting for the next event…'));
    close = feed({ agent: agent.value.trim(), path: path.value.trim(), type: type.value }, (ev) => {
      if (paused) return;
      if (!list.isConnected) card.replaceChildren(list);
      // Newest first, by seq: a change reaches the feed after the
      // decision that follows it in the log.
      const row = eventRow(ev, true);
      let before = list.firstElementChild;
      while (before && Number(before.dataset.seq) > ev.seq) before = before.nextElementSibling;
      // The stream starts with the log's recent events and resumes after
      // the last one it sent: an event already shown is not shown twice.
      if (before && Number(before.dataset.seq) === ev.seq) return;
      list.insertBefore(row, before);
      while (list.children.length > keep) list.lastChild.remove();
    }, (s) => { status.textContent = s === 'open' ? 'live' : s; status.dataset.state = s; });
  }
  open();
  return () => close && close();
}
