// flexssd dashboard: fetches the server-rendered fragment with the caller's
// bearer token and swaps it in every data-refresh-ms. No build step, no
// dependencies. The token lives in this tab's sessionStorage only and goes
// out as an Authorization header, never in a URL (URLs end up in logs,
// history and Referer headers).
'use strict';
(function () {
  const main = document.getElementById('main');
  const status = document.getElementById('status');
  const login = document.getElementById('login');
  const input = document.getElementById('token');
  const loginError = document.getElementById('login-error');
  const logout = document.getElementById('logout');
  const wear = document.getElementById('wear-toggle');
  const KEY = 'flexssd.dashboard.token';
  const src = main.dataset.src;
  const every = Math.max(250, parseInt(main.dataset.refreshMs, 10) || 2000);
  let selected = new URLSearchParams(location.hash.slice(1)).get('vssd') || '';
  let inflight = false;
  let timer = null;
  let updates = 0;
  let lastMs = 0;
  let last = null; // {head, ids, parts: Map(id -> html)} of what is shown

  // The fragment is a head (summary) and top-level <section id=...>s that
  // never nest. Only the sections whose HTML changed are replaced, so a big
  // flash map that did not change costs nothing on an update; the scroll
  // positions of replaced tables are kept.
  const SECTION = /<section id="([a-z]+)"[\s\S]*?<\/section>/g;
  function split(html) {
    const parts = new Map();
    let m;
    SECTION.lastIndex = 0;
    while ((m = SECTION.exec(html)) !== null) { parts.set(m[1], m[0]); }
    const at = html.indexOf('<section');
    return { head: at < 0 ? html : html.slice(0, at), ids: Array.from(parts.keys()).join(','), parts: parts };
  }

  function apply(html) {
    const next = split(html);
    const dash = document.getElementById('dash');
    if (!last || !dash || next.ids !== last.ids) {
      main.innerHTML = html; // rendered and escaped by the daemon
      last = next;
      return;
    }
    if (next.head !== last.head) {
      const t = document.createElement('template');
      t.innerHTML = next.head + '</div>';
      const fresh = t.content.firstElementChild;
      for (const a of fresh.attributes) { dash.setAttribute(a.name, a.value); }
      const old = dash.querySelector('.summary');
      const now = fresh.querySelector('.summary');
      if (old && now) { old.replaceWith(now); }
    }
    next.parts.forEach(function (h, id) {
      if (last.parts.get(id) === h) { return; }
      const el = document.getElementById(id);
      const scrolls = Array.from(el.querySelectorAll('.scroll'), function (s) { return s.scrollTop; });
      el.outerHTML = h;
      const now = document.getElementById(id);
      now.querySelectorAll('.scroll').forEach(function (s, i) { s.scrollTop = scrolls[i] || 0; });
    });
    last = next;
  }

  function token() {
    try { return sessionStorage.getItem(KEY) || ''; } catch (e) { return ''; }
  }

  function url() {
    return selected ? src + '?vssd=' + encodeURIComponent(selected) : src;
  }

  async function errorOf(r) {
    const text = await r.text();
    try { return JSON.parse(text).error || text; } catch (e) { return text; }
  }

  function showLogin(why) {
    login.hidden = false;
    logout.hidden = true;
    loginError.textContent = token() ? why : '';
    status.textContent = 'signed out';
    status.className = 'status error';
    main.textContent = '';
    last = null;
    input.focus();
  }

  function schedule() {
    clearTimeout(timer);
    // A page that takes long to draw is asked less often, so that it stays
    // responsive: never more than a third of the time goes to updating.
    timer = setTimeout(tick, Math.max(every, 3 * lastMs));
  }

  async function tick() {
    if (!document.hidden && login.hidden) { await refresh(); }
    schedule();
  }

  async function refresh() {
    if (inflight) { return; }
    inflight = true;
    const t0 = performance.now();
    try {
      const headers = { Accept: 'text/html' };
      const t = token();
      if (t) { headers.Authorization = 'Bearer ' + t; }
      const r = await fetch(url(), { headers: headers, cache: 'no-store', credentials: 'omit' });
      if (r.status === 401) { showLogin(await errorOf(r)); return; }
      if (!r.ok) {
        status.textContent = 'HTTP ' + r.status + ': ' + await errorOf(r);
        status.className = 'status error';
        if (r.status === 400 && selected) { selected = ''; location.hash = ''; }
        return;
      }
      const html = await r.text();
      const t1 = performance.now();
      const y = window.scrollY;
      apply(html);
      void main.offsetHeight; // layout now, inside the measurement
      await new Promise(function (res) { requestAnimationFrame(function () { setTimeout(res, 0); }); });
      window.scrollTo(0, y);
      const t2 = performance.now();
      lastMs = t2 - t0;
      updates += 1;
      document.body.dataset.updates = String(updates);
      document.body.dataset.fetchMs = (t1 - t0).toFixed(1);
      document.body.dataset.renderMs = (t2 - t1).toFixed(1);
      document.body.dataset.bytes = String(html.length);
      if (updates === 1) { document.body.dataset.firstMs = t2.toFixed(1); }
      status.textContent = 'live · update ' + updates + ' took ' + Math.round(t2 - t0) + ' ms';
      status.className = 'status ok';
      login.hidden = true;
      logout.hidden = !t;
    } catch (e) {
      status.textContent = 'cannot reach the daemon: ' + e;
      status.className = 'status error';
    } finally {
      inflight = false;
    }
  }

  function select(row) {
    selected = row.dataset.key === selected ? '' : row.dataset.key;
    location.hash = selected ? 'vssd=' + encodeURIComponent(selected) : '';
    refresh();
  }

  main.addEventListener('click', function (e) {
    const row = e.target.closest('tr[data-row="vssd"]');
    if (row) { select(row); }
  });
  main.addEventListener('keydown', function (e) {
    const row = e.target.closest('tr[data-row="vssd"]');
    if (row && e.key === 'Enter') { select(row); }
  });
  login.addEventListener('submit', function (e) {
    e.preventDefault();
    try { sessionStorage.setItem(KEY, input.value.trim()); } catch (err) { /* private mode */ }
    input.value = '';
    login.hidden = true;
    refresh();
  });
  logout.addEventListener('click', function () {
    try { sessionStorage.removeItem(KEY); } catch (err) { /* private mode */ }
    showLogin('');
  });
  wear.addEventListener('change', function () {
    document.body.classList.toggle('show-wear', wear.checked);
  });
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && login.hidden) { refresh(); }
  });
  refresh().then(schedule);
})();
