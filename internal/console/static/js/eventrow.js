// One event of the log as a line: when, seq, type, agent, intent, and what
// happened in a few words.
import { h, badge, json, clock } from './dom.js';

export function eventRow(ev, fresh = false) {
  return h('li.event', { class: fresh ? 'event fresh' : 'event', dataset: { seq: ev.seq, type: ev.type, agent: ev.agent || '', intent: ev.intent || '' } },
    h('span.muted.mono', clock(ev.time)),
    h('span.mono', '#' + ev.seq),
    h('span', badge(ev.type)),
    h('span', ev.agent || ''),
    h('span.what',
      ev.intent ? h('a.intent', { href: '#story/' + ev.intent, title: 'the story of this intent' }, ev.intent) : null,
      ev.intent ? ' ' : null,
      what(ev),
      ev.trace ? h('span.muted.mono', ` trace ${typeof ev.trace === 'string' ? ev.trace : json(ev.trace)}`) : null));
}

// what says what an event records.
export function what(ev) {
  switch (ev.type) {
    case 'intent': {
      const r = ev.received || {};
      if (!r.intent) return `refused: ${r.error || 'invalid'}`;
      const i = r.intent;
      return `${i.kind}${i.action ? ' ' + i.action : ''}${i.on_conflict ? ' (on conflict: ' + i.on_conflict + ')' : ''}: ` +
        (i.writes || []).map((w) => `${w.op} ${w.path}`).join(', ');
    }
    case 'decision': {
      const d = ev.decision || {};
      return [d.outcome, d.reason && `(${d.reason})`, d.rev && `rev ${d.rev}`, d.detail && `— ${d.detail}`].filter(Boolean).join(' ');
    }
    case 'change':
      return ((ev.change || {}).writes || []).map((w) => `${w.op} ${w.path}${w.value !== undefined ? ' = ' + json(w.value, 40) : ''} (v${w.new_version})`).join(', ');
    case 'grant':
    case 'renew': {
      const g = ev.grant || {};
      return `${g.txn} fence ${g.fence} lease ${g.lease_ms} ms, until ${g.expires ? clock(g.expires) : '?'}`;
    }
    case 'expire':
    case 'release': {
      const r = ev.release || {};
      return `${r.txn} ${r.cause}`;
    }
    case 'wait':
    case 'escalate': {
      const w = ev.wait || {};
      const g = w.gate;
      if (g) {
        const who = g.ask ? `asks "${g.ask.question}"` : g.review ? `refused (${g.review}), sent to review by ${g.by.join(', ')}` :
          `waits for ${g.quorum} approval${g.quorum === 1 ? '' : 's'} of ${g.by.join(', ')}`;
        return `${who}, until ${w.deadline ? clock(w.deadline) : '?'}`;
      }
      return `until ${w.deadline ? clock(w.deadline) : '?'}: ` + (w.conflicts || []).map((c) => `${c.kind} on ${c.path} with ${c.with_agent}`).join(', ') +
        (w.panel ? ` (a panel: ${w.panel.quorum} must agree)` : '');
    }
    case 'notice': {
      const n = ev.notice || {};
      return `${n.kind}: ${n.detail || ''}`;
    }
    case 'resolve': {
      const r = ev.resolution || {};
      return `case ${r.escalation} by ${r.arbiter}: ${r.rationale || ''}`;
    }
    case 'vote': {
      const v = ev.vote || {};
      const with_ = v.verdict === 'answer' ? ` ${json(v.answer, 40)}` : v.resolution ? ` winners ${(v.resolution.winners || []).join(', ') || '-'}` : '';
      return `${v.verdict}${with_} by ${v.agent}${v.rationale ? ': ' + v.rationale : ''}`;
    }
    case 'rules': {
      const r = ev.rules || {};
      const shadow = r.shadow_hash ? `; shadow ${r.shadow_hash.slice(0, 12)} (${r.shadow_mode || 'audit'})` : '';
      return `rules ${String(r.hash || '').slice(0, 12)} from ${r.source || '?'}${shadow}`;
    }
    case 'shadow': {
      const s = ev.shadow || {};
      const wouldBe = s.kind === 'error' ? 'error' : s.reason ? `${s.would_be}:${s.reason}` : s.would_be;
      return `${s.mode}: decided ${s.decided}, would be ${wouldBe}${s.rule ? ' by ' + s.rule : ''}${s.detail ? ': ' + s.detail : ''}`;
    }
  }
  return '';
}
