// api: the read token and the ingest's read endpoints (docs/CLI.md). Every
// request carries the token in Authorization (never in a URL: URLs end up
// in logs and histories); paths are relative to the page, so the console
// works behind a reverse proxy under any path prefix.

// One token per console (its directory: the page and replay.html share it).
const KEY = 'sandglass.read-token:' + location.pathname.replace(/[^/]*$/, '');

export class AuthError extends Error {
  constructor(msg) {
    super(msg);
    this.name = 'AuthError';
  }
}

// A link carrying the token (/?token=T, as Jupyter does) opens the console
// directly: the token goes to this tab's sessionStorage and out of the
// address bar and the history entry at once.
export function takeTokenFromUrl() {
  const u = new URL(location.href);
  if (!u.searchParams.has('token')) return;
  const t = u.searchParams.get('token').trim();
  u.searchParams.delete('token');
  history.replaceState(history.state, '', u.pathname + u.search + u.hash);
  if (t) sessionStorage.setItem(KEY, t);
}

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(t) {
  sessionStorage.setItem(KEY, t.trim());
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
}

function url(path, params) {
  const u = new URL(path, document.baseURI);
  for (const [k, v] of Object.entries(params || {}))
    if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, String(v));
  return u;
}

async function errorOf(r) {
  try {
    const j = await r.json();
    if (j && typeof j.error === 'string') return j.error;
  } catch (_) { /* not JSON */ }
  return `HTTP ${r.status}`;
}

// GET path's body as text (a recording), as get() below reads JSON.
export async function getText(path, params) {
  const r = await fetch(url(path, params), {
    headers: { Authorization: `Bearer ${token()}` }, cache: 'no-store', credentials: 'omit',
  });
  if (r.status === 401) throw new AuthError(await errorOf(r));
  if (!r.ok) throw new Error(await errorOf(r));
  return r.text();
}

// GET a read endpoint: its JSON. 401 throws AuthError (the page asks for
// a token again), anything else not 200 an Error with the ingest's reason.

export async function get(path, params, signal) {
  const r = await fetch(url(path, params), {
    headers: { Authorization: `Bearer ${token()}` },
    cache: 'no-store',
    credentials: 'omit',
    signal,
  });
  if (r.status === 401) throw new AuthError(await errorOf(r));
  if (!r.ok) throw new Error(await errorOf(r));
  return r.json();
}

// One SSE message block into {id, event, data}.
function parseMessage(block) {
  const m = { id: null, event: 'message', data: [] };
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'id') m.id = value;
    else if (field === 'event') m.event = value;
    else if (field === 'data') m.data.push(value);
  }
  m.data = m.data.join('\n');
  return m;
}

// GET /v1/stream, pushed (Server-Sent Events read from fetch, so that the
// token travels in a header and the cursor is ours): on.events(rows) for
// each batch of committed events in id order, on.live() once caught up,
// on.state('live' | 'connecting' | 'reconnecting' | 'auth'), on.auth(err).
// It reconnects after a drop, an ingest restart or an overflow with
// Last-Event-ID: the last id it handed over (no gap, no duplicate).
// params: learner, task, sandbox, after, after_seq. Returns {close()}.
export function stream(params, on) {
  let last = null;
  let closed = false;
  let ctrl = null;
  let delay = 100;

  async function once() {
    ctrl = new AbortController();
    const headers = { Authorization: `Bearer ${token()}`, Accept: 'text/event-stream' };
    if (last !== null) headers['Last-Event-ID'] = last; // wins over after=
    const r = await fetch(url('v1/stream', params), {
      headers, cache: 'no-store', credentials: 'omit', signal: ctrl.signal,
    });
    if (r.status === 401) throw new AuthError(await errorOf(r));
    if (!r.ok) throw new Error(await errorOf(r));
    on.state && on.state('connected');
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let cut;
      const rows = [];
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const m = parseMessage(buf.slice(0, cut));
        buf = buf.slice(cut + 2);
        if (m.event === 'message' && m.data) {
          rows.push(JSON.parse(m.data));
          if (m.id !== null) last = m.id;
        } else if (m.event === 'live') {
          if (rows.length) on.events(rows.splice(0));
          delay = 100;
          on.live && on.live();
          on.state && on.state('live');
        } else if (m.event === 'overflow') {
          const o = JSON.parse(m.data || '{}');
          if (typeof o.after === 'number') last = String(o.after);
        }
      }
      if (rows.length) on.events(rows);
    }
  }

  async function run() {
    while (!closed) {
      try {
        on.state && on.state(last === null ? 'connecting' : 'reconnecting');
        await once();
      } catch (e) {
        if (closed) return;
        if (e instanceof AuthError) {
          on.state && on.state('auth');
          on.auth && on.auth(e);
          return;
        }
      }
      if (closed) return;
      on.state && on.state('reconnecting');
      await new Promise((res) => setTimeout(res, delay));
      delay = Math.min(delay * 2, 5000);
    }
  }

  run();
  return {
    close() {
      closed = true;
      if (ctrl) ctrl.abort();
    },
  };
}
