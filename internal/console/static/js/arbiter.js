// The open cases a person acts on — intents a rule holds for approval,
// escalations waiting for an arbiter, tasks to reconcile — with the diff
// an approval would make and the deadline counting down; then the arbiter
// queue (cases waiting for an arbiter, or held by one) and the dead
// letters (cases no one settled by their deadline).
import { get, post, skew } from './api.js';
import { h, badge, empty, clock, json } from './dom.js';
import { every } from './live.js';
import { whoami, setActAs, mayVote } from './me.js';

export default function arbiterView(root) {
  const who = h('div#actor');
  const open = h('div#open');
  const queue = h('div#queue');
  const dead = h('div#dlq');
  root.append(h('h2', 'Open cases'), who, open, h('h2', { style: 'margin-top:1.2rem' }, 'Arbiter queue'), queue,
    h('h2', { style: 'margin-top:1.2rem' }, 'Dead letters'), dead);
  let offset = 0;
  let shown = '';
  let me = null;

  const stop = every(3000, async () => {
    me = await whoami();
    renderActor();
    const d = await get('cases');
    offset = skew(d.now);
    // Drawn again only when the cases change, so that a reason being
    // typed is not lost.
    const key = JSON.stringify([me.agent, d.cases.map((r) => [r.id, r.approvals, r.deadline])]);
    if (key !== shown) {
      shown = key;
      open.replaceChildren(...(d.cases.length ? d.cases.map(openCase) : [h('div.card', empty('No case is open.'))]));
    }
    const q = await get('arbiter');
    queue.replaceChildren(...cases(q.queue, true));
    dead.replaceChildren(...cases(q.dead_letters, false));
    tick();
  });

  function renderActor() {
    if (me.known) {
      who.replaceChildren(h('div.muted', me.read_only ? `Read-only: ${me.agent || 'this token'} may not act.` : `You act as ${me.agent}.`));
      return;
    }
    if (who.firstChild) return;
    const input = h('input#act-as', { value: me.agent || '', placeholder: 'agent name', size: 16 });
    who.replaceChildren(h('div', 'Act as ', input, ' ', h('button.plain#act-as-set', { onclick: () => { setActAs(input.value.trim()); shown = ''; } }, 'set'),
      h('span.muted', '  (no --auth: the coordinator takes the name you give)')));
  }

  function openCase(row) {
    const c = row.case || {};
    const esc = (c.intents || []).find((i) => i && i.id === c.id);
    const result = h('div.result');
    const act = (fn) => async () => {
      result.className = 'result';
      result.textContent = '…';
      try {
        result.textContent = await fn();
        result.classList.add('ok');
        shown = '';
      } catch (e) {
        result.textContent = String(e.message || e);
        result.classList.add('refused');
      }
    };
    const card = h('div.card.case', { dataset: { case: row.id, kind: row.kind } },
      h('div', badge(row.kind, row.kind === 'reconcile' ? 'rejected' : 'escalated'), ' ',
        row.kind === 'reconcile' ? h('span.path', row.id) : h('a.intent', { href: '#story/' + row.id }, row.id),
        esc ? ` from ${esc.agent}` : '',
        row.deadline ? h('span.countdown', { dataset: { expires: row.deadline } }) : null));
    if (row.kind === 'reconcile') {
      card.append(h('div', `effects pending: ${(row.pending || []).join(', ')}`));
      if (me.agent && !me.read_only) {
        const picks = (row.pending || []).map((key) => h('select.effect', { dataset: { key } },
          ['confirmed', 'failed', 'compensated'].map((s) => h('option', { value: s }, s))));
        const why = h('input.why', { placeholder: 'how you know (required)', size: 40 });
        card.append(h('div.actions', (row.pending || []).map((key, i) => h('label', `${key}: `, picks[i], ' ')), why, ' ',
          h('button.reconcile', { onclick: act(async () => {
            const effects = Object.fromEntries(picks.map((p) => [p.dataset.key, p.value]));
            const d = await post('reconcile', { task: row.id, effects, why: why.value, agent: me.agent });
            return `declared: the intent was ${d.outcome}${d.reason ? ` (${d.reason}: ${d.detail})` : ''}`;
          }) }, 'Declare')));
      }
      card.append(result);
      return card;
    }
    if (esc) {
      card.append(h('div.mono', `${esc.kind}${esc.action ? ' ' + esc.action : ''}: `,
        (esc.writes || []).map((w) => `${w.op} ${w.path}${w.value !== undefined ? ' = ' + json(w.value, 60) : ''}`).join(', ')));
    }
    if (row.kind === 'input') {
      const a = c.approval;
      card.append(h('div.question', h('b', 'asks: '), a.ask.question),
        h('div.muted.mono', a.ask.schema ? `answer schema: ${json(a.ask.schema, 120)}` : 'any answer'),
        h('div', `the answer is written at `, h('span.path', a.path), a.by && a.by.length ? `; ${a.by.join(', ')} may answer` : ''));
      if (me.agent && !me.read_only) {
        const value = h('input.answer', { placeholder: 'the answer, as JSON: 42, "text", {"a": 1}', size: 40 });
        card.append(h('div.actions', value, ' ',
          h('button.answer', { onclick: act(async () => {
            let answer;
            try { answer = JSON.parse(value.value); } catch (e) { throw new Error(`the answer is not JSON: ${e.message}`); }
            return said(await post('vote', { case: row.id, verdict: 'answer', answer, agent: me.agent }));
          }) }, 'Answer')));
      }
    } else if (row.kind === 'approval' || row.kind === 'review') {
      const a = c.approval;
      if (a.review) card.append(h('div.refusal', `refused (${a.review}): ${a.refusal}; approving lets it through`));
      card.append(h('div', `needs ${a.quorum} approval${a.quorum === 1 ? '' : 's'} of ${a.by.join(', ')}; `, h('b.count', `${row.approvals}`), ` so far; at the deadline: ${a.fallback}`),
        h('table.diff', h('thead', h('tr', h('th', 'path'), h('th', 'now'), h('th', 'after'))),
          h('tbody', Object.keys({ ...(c.state || {}), ...(a.after || {}) }).filter((p) => (a.after || {})[p] || (esc?.writes || []).some((w) => w.path === p)).map((p) => {
            const now = (c.state || {})[p];
            const after = (a.after || {})[p];
            return h('tr', { dataset: { path: p } }, h('td.path', p),
              h('td.mono.now', now && now.exists ? json(now.value, 60) : 'absent'),
              h('td.mono.after', after ? (after.exists ? json(after.value, 60) : 'deleted') : '?'));
          }))),
        ...(a.votes || []).map((v) => h('div.vote', badge(v.verdict, v.verdict === 'approve' ? 'applied' : 'rejected'), ` ${v.agent}`, v.rationale ? `: ${v.rationale}` : '')));
      if (me.agent && !me.read_only) {
        const why = h('input.why', { placeholder: 'why (required to deny)', size: 40 });
        card.append(h('div.actions', why, ' ',
          h('button.approve', { onclick: act(async () => said(await post('vote', { case: row.id, verdict: 'approve', rationale: why.value, agent: me.agent }))) }, 'Approve'), ' ',
          h('button.plain.deny', { onclick: act(async () => said(await post('vote', { case: row.id, verdict: 'deny', rationale: why.value, agent: me.agent }))) }, 'Deny')));
        if (!mayVote(c, me.agent, me.roles || [])) card.append(h('div.muted', `The rule may not let ${me.agent} vote here; the coordinator decides.`));
      }
    } else {
      card.append(...(c.conflicts || []).map((x) => h('div', `${x.kind} on `, h('span.path', x.path), ` with ${x.with_agent || '?'}`)));
      if (me.agent && !me.read_only) {
        const ids = (c.intents || []).filter(Boolean).map((i) => i.id);
        const choice = ids.map((id) => h('label', h('input', { type: 'radio', name: 'winner-' + row.id, value: id, class: 'winner' }),
          ` ${id === c.id ? 'the escalated intent' : 'the holder\'s'} ${id}`));
        const why = h('input.why', { placeholder: 'rationale (required)', size: 40 });
        card.append(h('div.actions', choice.map((l) => h('div', l)), why, ' ',
          h('button.resolve', { onclick: act(async () => {
            const win = card.querySelector('input.winner:checked');
            if (!win) throw new Error('pick the intent that wins');
            await post('resolve', { case: row.id, winners: [win.value], losers: ids.filter((i) => i !== win.value), rationale: why.value, agent: me.agent });
            return `resolved: ${win.value} wins`;
          }) }, 'Resolve')));
      }
    }
    card.append(result);
    return card;
  }

  // said puts a vote's answer in a sentence.
  function said(r) {
    const d = r.decision;
    const past = { approve: 'approved', deny: 'denied', answer: 'answered' }[r.verdict] || r.verdict;
    if (!d) return `${past}: the case waits for more approvals`;
    return `${past}: the intent was ${d.outcome}${d.reason ? ` (${d.reason}: ${d.detail})` : ''}`;
  }

  function tick() {
    const now = Date.now() + offset;
    for (const el of open.querySelectorAll('.countdown')) {
      const left = Date.parse(el.dataset.expires) - now;
      el.textContent = left > 0 ? `  deadline in ${Math.ceil(left / 1000)} s` : '  deadline passed';
      el.dataset.ms = Math.max(0, Math.round(left));
    }
  }
  const timer = setInterval(tick, 250);
  return () => { stop(); clearInterval(timer); };
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
