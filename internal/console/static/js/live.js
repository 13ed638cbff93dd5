// What every view shares: the error line and the polling of its data.

// showError puts a failure above the view (null clears it).
export function showError(err) {
  const el = document.getElementById('error');
  el.hidden = !err;
  el.textContent = err ? String(err.message || err) : '';
}

// every calls fn now and then every ms while the view lasts; it returns
// the stop function.
export function every(ms, fn) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    try { await fn(); showError(null); } catch (e) { showError(e); }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

