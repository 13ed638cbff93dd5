// Who the person using the console acts as. Under --auth it is the agent
// whose token the browser gave (read-only for an observer's); without, the
// person names the agent, kept in this browser.
import { get } from './api.js';

let me = null;

export async function whoami() {
  if (!me) {
    me = await get('me');
    if (!me.known) me.agent = localStorage.getItem('coagent.actAs') || '';
  }
  return me;
}

// setActAs names the agent the person acts as, without --auth.
export function setActAs(name) {
  if (me && !me.known) me.agent = name;
  localStorage.setItem('coagent.actAs', name);
}

// mayVote says whether agent (with roles) may vote on approval case c:
// the rule's approve names it, it has not voted, and it is not its own.
export function mayVote(c, agent, roles = []) {
  const a = c.approval;
  if (!a || !agent) return false;
  const esc = (c.intents || []).find((i) => i && i.id === c.id);
  if (esc && esc.agent === agent) return false;
  if ((a.votes || []).some((v) => v.agent === agent)) return false;
  if (a.ask && !(a.by || []).length) return true; // any agent may answer
  return (a.by || []).some((p) => p === agent || (p.startsWith('role:') && roles.includes(p.slice(5))));
}
