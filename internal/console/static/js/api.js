// The console's backend: JSON under api/, relative to the page, so the
// console works wherever it is mounted.

// A token given in the page's address (?token=…) goes with every request,
// for a listener that asks for one.
const token = new URLSearchParams(location.search).get('token');

export async function get(path, params = {}) {
  const url = new URL('api/' + path, document.baseURI);
  for (const [k, v] of Object.entries(params)) if (v !== '' && v != null) url.searchParams.set(k, v);
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const res = await fetch(url, { headers, cache: 'no-store' });
  const body = await res.json().catch(() => ({ error: `${res.status} ${res.statusText}` }));
  if (!res.ok) throw new Error(body.error || `${res.status} ${res.statusText}`);
  return body;
}

// feed opens the live event feed with a filter; onEvent gets each event.
export function feed(filter, onEvent, onState) {
  const url = new URL('api/events', document.baseURI);
  for (const [k, v] of Object.entries(filter)) if (v) url.searchParams.set(k, v);
  if (token) url.searchParams.set('token', token);
  const es = new EventSource(url);
  es.addEventListener('open', () => onState('open'));
  es.addEventListener('event', (m) => onEvent(JSON.parse(m.data)));
  es.onerror = () => onState(es.readyState === EventSource.CLOSED ? 'closed' : 'reconnecting');
  return () => es.close();
}

// skew is how far the server's clock is ahead of the browser's, from an
// answer's "now" taken when it arrived.
export function skew(now) {
  return Date.parse(now) - Date.now();
}

// post sends a JSON body to an action and returns its answer; a refusal
// is an error with the coordinator's words.
export async function post(path, body) {
  const url = new URL('api/' + path, document.baseURI);
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), cache: 'no-store' });
  const answer = await res.json().catch(() => ({ error: `${res.status} ${res.statusText}` }));
  if (!res.ok) throw new Error(answer.error || `${res.status} ${res.statusText}`);
  return answer;
}
