// The state tree: every path with its value, version and mod_rev, now or
// at an earlier revision (the log's changes folded up to it).
import { get } from './api.js';
import { h, json, empty } from './dom.js';
import { every, showError } from './live.js';

export default function stateView(root, arg) {
  let rev = /^\d+$/.test(arg || '') ? Number(arg) : 0; // 0: the latest
  let selected = null;
  let showDeleted = false;
  const collapsed = new Set();
  let data = null;

  const revInput = h('input#rev', { type: 'number', min: 1, placeholder: 'latest', size: 8, value: rev || '' });
  const shown = h('span#rev-shown.muted');
  const tree = h('div#tree');
  const detail = h('div#detail.card');
  root.append(
    h('div.toolbar',
      h('label', 'State at revision ', revInput),
      h('button#rev-go', { onclick: () => pick(Number(revInput.value) || 0) }, 'Show'),
      h('button#rev-latest.plain', { onclick: () => { revInput.value = ''; pick(0); } }, 'Latest'),
      h('label', h('input', { type: 'checkbox', onchange: (e) => { showDeleted = e.target.checked; render(); } }), ' deleted paths'),
      shown),
    h('div.split', h('div.card', tree), detail));
  revInput.addEventListener('keydown', (e) => { if (e.key === 'Enter') pick(Number(revInput.value) || 0); });

  async function load() {
    data = await get('state', rev ? { rev } : {});
    render();
  }

  function pick(r) {
    rev = r;
    history.replaceState(null, '', '#state' + (r ? '/' + r : ''));
    load().then(() => showError(null), showError);
  }

  function render() {
    if (!data) return;
    shown.textContent = data.latest ? `rev ${data.rev} (latest)` : `rev ${data.rev} of ${data.head}`;
    shown.dataset.rev = data.rev;
    const kids = new Map();
    for (const n of data.nodes) {
      if (n.path === '') continue;
      const i = n.path.lastIndexOf('.');
      const parent = i < 0 ? '' : n.path.slice(0, i);
      if (!kids.has(parent)) kids.set(parent, []);
      kids.get(parent).push(n);
    }
    const byPath = new Map(data.nodes.map((n) => [n.path, n]));
    // The boards another shard decides (docs/sharding.md).
    const shard = data.shard || {};
    const elsewhere = (board) => {
      const s = (shard.owners || {})[board];
      return s && s !== shard.shard ? s : '';
    };
    // Paths whose values the readers rules keep from the console: folded
    // as null, shown as what they are.
    const redacted = new Set(data.redacted || []);
    const list = (parent) => {
      const items = (kids.get(parent) || []).filter((n) => showDeleted || n.kind !== 'absent');
      if (!items.length) return null;
      return h('ul', items.map((n) => {
        const key = n.path.slice(parent ? parent.length + 1 : 0);
        const sub = n.kind === 'object' ? list(n.path) : null;
        const cls = ['node', n.kind, collapsed.has(n.path) ? 'collapsed' : '', selected === n.path ? 'selected' : ''].filter(Boolean).join(' ');
        return h('li', { class: cls, dataset: { path: n.path } },
          h('div.row', { onclick: () => { select(n.path); } },
            h('span.toggle', { onclick: (e) => { e.stopPropagation(); toggle(n.path); } }, sub ? (collapsed.has(n.path) ? '▸' : '▾') : ''),
            h('span.key', key),
            !parent && elsewhere(n.path) ? h('span.shard.muted', { title: 'this board is decided by another shard: its value here is what it left' }, ` on shard ${elsewhere(n.path)}`) : null,
            redacted.has(n.path) ? h('span.val.muted', { title: 'kept from this console by the readers rules' }, 'redacted')
              : n.kind === 'leaf' ? h('span.val', value(n)) : n.kind === 'absent' ? h('span.val.muted', 'deleted') : null,
            h('span.meta', h('span.ver', 'v' + n.version), ' · ', h('span.modrev', 'mod_rev ' + n.mod_rev))),
          sub);
      }));
    };
    const ul = list('');
    if (ul) ul.classList.add('tree');
    tree.replaceChildren(ul || empty(`The state is empty at rev ${data.rev}.`));
    renderDetail(byPath);
  }

  function toggle(path) {
    if (collapsed.has(path)) collapsed.delete(path); else collapsed.add(path);
    render();
  }

  function select(path) {
    selected = path;
    render();
  }

  async function renderDetail(byPath) {
    const n = selected && byPath.get(selected);
    if (!n) {
      detail.replaceChildren(h('h2', 'A path'), empty('Pick a path in the tree to see it whole.'));
      return;
    }
    const parts = [h('h2.path', n.path),
      h('table', h('tbody',
        h('tr', h('th', 'kind'), h('td', n.kind)),
        h('tr', h('th', 'version'), h('td.ver', String(n.version))),
        h('tr', h('th', 'mod_rev'), h('td', h('a', { href: '#state/' + n.mod_rev, onclick: (e) => { e.preventDefault(); revInput.value = n.mod_rev; pick(n.mod_rev); } }, String(n.mod_rev)))))),
      h('h3', `value at rev ${data.rev}`), h('pre', pretty(n, byPath))];
    detail.replaceChildren(...parts);
    if (data.latest) {
      // What the coordinator answers now (state.get), next to the fold.
      try {
        const live = await get('value', { path: n.path });
        if (selected !== n.path) return;
        const e = live.entry;
        detail.append(h('h3', `state.get at rev ${live.rev}`),
          e.exists ? h('pre', JSON.stringify(e.value, null, 2)) : empty(e.redacted ? 'kept from this console by the readers rules' : 'absent'),
          h('div.muted', `version ${e.version}, mod_rev ${e.mod_rev || 0}`));
      } catch (err) { showError(err); }
    }
  }

  // pretty is a node's value: a leaf's own, an object's built from the
  // leaves under it.
  function pretty(n, byPath) {
    if (n.kind === 'absent') return 'deleted';
    if (n.kind === 'leaf') return JSON.stringify(leaf(n), null, 2);
    const obj = {};
    for (const m of data.nodes) {
      if (m.kind !== 'leaf' || !m.path.startsWith(n.path + '.')) continue;
      const keys = m.path.slice(n.path.length + 1).split('.');
      let o = obj;
      for (const k of keys.slice(0, -1)) o = o[k] = o[k] || {};
      o[keys[keys.length - 1]] = leaf(m);
    }
    return JSON.stringify(obj, null, 2);
  }

  const stop = every(4000, () => (rev ? Promise.resolve() : load()));
  if (rev) pick(rev);
  return stop;
}

function leaf(n) {
  return n.number ? n.number : n.value;
}

function value(n) {
  return n.number ? n.number : json(n.value, 60);
}
