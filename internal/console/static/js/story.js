// One intent's story: every event of it, in log order, found by intent id
// (or by trace id, where the log records them).
import { get } from './api.js';
import { h, empty } from './dom.js';
import { eventRow } from './eventrow.js';
import { showError } from './live.js';

export default function storyView(root, arg) {
  const q = h('input#story-q', { placeholder: 'intent id or trace id', size: 34, value: arg || '' });
  const out = h('div#story.card', empty('Give an intent id (a ULID) or a trace id.'));
  root.append(h('div.toolbar', q, h('button#story-go', { onclick: () => search() }, 'Show its story')), out);
  q.addEventListener('keydown', (e) => { if (e.key === 'Enter') search(); });

  async function search() {
    const id = q.value.trim();
    if (!id) return;
    history.replaceState(null, '', '#story/' + id);
    out.replaceChildren(empty('Reading the log…'));
    try {
      const s = await get('story', { q: id });
      const d = s.decision;
      out.replaceChildren(...[
        h('h2', s.intent ? `Intent ${s.intent}` : `Trace ${s.trace}`),
        d ? h('p', `${d.agent}'s intent, decided `, h('b', d.outcome), d.reason ? ` (${d.reason})` : '', d.detail ? ` — ${d.detail}` : '') : null,
        s.events.length ? h('ol.events', s.events.map((ev) => eventRow(ev))) : empty('No event found.'),
        s.complete ? null : h('p.muted', 'The log is long: only its first pages were read.')].filter(Boolean));
      showError(null);
    } catch (e) {
      out.replaceChildren(empty('—'));
      showError(e);
    }
  }
  if (arg) search();
}
