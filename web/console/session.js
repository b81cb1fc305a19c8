// session: one session's timeline. It opens on its newest events (a page
// of /v1/events by seq, counted back from the session's last), puts older
// pages above as the reader scrolls up, and appends new events as the
// pushed stream brings them (GET /v1/stream for this session, after the
// last row loaded: no gap, no duplicate, no polling). A 10,000-event
// session opens as fast as a 400-event one.

import * as api from './api.js';
import { add, el, fmtTime, routeHref, vis, zoneLabel } from './dom.js';
import { Timeline, isBoundary } from './timeline.js';

const PAGE = 400;

// Every event of the session with lo < seq < hi, in seq order (a page may
// stop early at the ingest's byte bound: ask again from where it stopped).
async function range(id, lo, hi) {
  const out = [];
  let after = lo;
  for (;;) {
    const want = hi === Infinity ? 1000 : Math.min(1000, Math.max(1, hi - after - 1));
    const page = await api.get('v1/events', { ...id, after_seq: after, limit: want });
    for (const ev of page.events) if (ev.seq < hi) out.push(ev);
    const lastSeq = page.events.length ? page.events[page.events.length - 1].seq : null;
    if (!page.more || lastSeq === null || lastSeq >= hi - 1) return out;
    after = lastSeq;
  }
}

export function sessionPage(root, app, learner, task, sandbox) {
  const id = { learner, task, sandbox };
  let closed = false;
  let live = null;
  let held = [];     // events above the top segment's first boundary
  let lowest = null; // the lowest seq loaded (held or shown)
  let maxSeq = -1;
  let maxId = 0;
  let atStart = false;
  let loadingOlder = false;
  let total = 0;

  const title = el('h1', 'session-title');
  add(title, el('span', 'learner', vis(learner)), ' · ', el('span', 'task', vis(task)), ' · ',
    el('span', 'sandbox', vis(sandbox)));
  const facts = el('div', 'session-facts');
  const stateEl = el('span', 'state');
  const countEl = el('span', 'count');
  const lastEl = el('span', 'last');
  const showAll = el('input');
  showAll.type = 'checkbox';
  showAll.id = 'show-all';
  const showLabel = add(el('label', 'toggle'), showAll, ' show everything (activity, processes, checkpoints before each command)');
  showLabel.htmlFor = 'show-all';
  // The terminal sessions' replay: a page of its own (replay.js).
  const replay = el('a', 'replay-link', 'replay the terminal');
  replay.href = 'replay.html' + routeHref(learner, task, sandbox);
  // The learner's terminal, live and read-only (watch.js).
  const watchLink = el('a', 'watch-link', 'watch live');
  watchLink.href = 'watch.html' + routeHref(sandbox);
  add(facts, stateEl, countEl, lastEl, el('span', 'zone', `times in ${zoneLabel()}`), showLabel, replay, watchLink);
  const olderBtn = el('button', 'older', 'load earlier events');
  olderBtn.type = 'button';
  const startNote = el('div', 'note start', 'the session starts here');
  startNote.hidden = true;
  const tl = el('div', 'timeline');
  tl.id = 'timeline';
  add(root, title, facts, startNote, olderBtn, tl);
  // The terminal sessions recorded (their exec ids): a command typed in
  // one links to the replay, seeked to it.
  let recorded = new Set();
  const timeline = new Timeline(tl, (ev) => {
    const x = (ev.payload || {}).exec_id;
    if (!recorded.has(String(x))) return null;
    const q = new URLSearchParams({ at: ev.ts, cmd: String((ev.payload || {}).cmd ?? '') });
    return 'replay.html' + routeHref(learner, task, sandbox, String(x)) + '?' + q;
  });
  showAll.addEventListener('change', () => tl.classList.toggle('show-all', showAll.checked));

  let state = { state: '?', aborted: false };
  function showFacts() {
    stateEl.textContent = state.state;
    stateEl.className = `state st-${['active', 'aborted', 'destroyed', 'expired'].includes(state.state) ? state.state : 'other'}`;
    countEl.textContent = `${total} events`;
    lastEl.textContent = state.last ? `last ${fmtTime(state.last)}` : '';
  }

  function track(ev) {
    total = Math.max(total, ev.seq + 1);
    if (!state.last || ev.ts > state.last) state.last = ev.ts;
    const p = ev.payload || {};
    if (ev.kind === 'sandbox' && (p.state === 'destroyed' || p.state === 'expired')) state.over = p.state;
    if (ev.kind === 'session_abort') state.aborted = true;
    state.state = state.over || (state.aborted ? 'aborted' : 'active');
  }

  function nearBottom() {
    const d = document.scrollingElement;
    return d.scrollHeight - d.scrollTop - d.clientHeight < 120;
  }

  // Puts rows (older than what is shown, in seq order) above it: what
  // precedes their first boundary waits for the next page up.
  function placeOlder(rows) {
    const all = rows.concat(held);
    let b = atStart ? 0 : all.findIndex(isBoundary);
    if (b < 0) b = all.length;
    held = all.slice(0, b);
    const seg = all.slice(b);
    if (!seg.length) return false;
    const d = document.scrollingElement;
    const before = d.scrollHeight;
    timeline.prepend(seg);
    if (lowest !== null) d.scrollTop += d.scrollHeight - before; // keep the reader's place
    return true;
  }

  async function older() {
    if (loadingOlder || atStart || closed) return;
    loadingOlder = true;
    olderBtn.disabled = true;
    try {
      let placed = false;
      while (!placed && !atStart && !closed) {
        const hi = lowest;
        const lo = Math.max(-1, hi - 1 - PAGE);
        const rows = await range(id, lo, hi);
        if (lo === -1) atStart = true;
        if (rows.length) lowest = rows[0].seq;
        else lowest = lo + 1;
        placed = placeOlder(rows);
      }
    } finally {
      loadingOlder = false;
      olderBtn.disabled = false;
      olderBtn.hidden = atStart;
      startNote.hidden = !atStart;
    }
  }
  olderBtn.addEventListener('click', () => older().catch((e) => app.fail(e)));
  const io = new IntersectionObserver((ents) => {
    if (ents.some((e) => e.isIntersecting) && lowest !== null) older().catch((e) => app.fail(e));
  });

  function onLive(evs) {
    const fresh = [];
    for (const ev of evs) {
      if (ev.seq <= maxSeq) continue;
      maxSeq = ev.seq;
      maxId = Math.max(maxId, ev.id);
      track(ev);
      fresh.push(ev);
    }
    if (!fresh.length) return;
    const follow = nearBottom();
    timeline.append(fresh);
    showFacts();
    if (follow) document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight;
  }

  async function open() {
    const casts = api.get('v1/casts', { ...id }).catch(() => ({ casts: [] }));
    const info = await api.get('v1/sessions', { ...id, limit: 1 });
    const row = info.sessions.find((r) => r.learner === learner && r.task === task && r.sandbox === sandbox);
    if (!row) {
      root.append(el('p', 'error', 'No such session within this read token\'s scope.'));
      olderBtn.hidden = true;
      return;
    }
    state = { state: row.state, aborted: row.aborted, last: row.last_activity };
    if (row.state === 'destroyed' || row.state === 'expired') state.over = row.state;
    total = row.events;
    const lo = Math.max(-1, row.events - 1 - PAGE);
    const rows = await range(id, lo, Infinity);
    recorded = new Set(((await casts).casts || []).map((c) => String(c.session)));
    if (closed) return;
    performance.mark('sg-session-fetched');
    atStart = lo === -1;
    lowest = rows.length ? rows[0].seq : lo + 1;
    for (const ev of rows) {
      maxSeq = Math.max(maxSeq, ev.seq);
      maxId = Math.max(maxId, ev.id);
      track(ev);
    }
    // The newest page: shown from its first boundary; if it has none
    // (one long command), pages above come first.
    const newest = rows.slice();
    let b = atStart ? 0 : newest.findIndex(isBoundary);
    if (b < 0) b = newest.length;
    held = newest.slice(0, b);
    timeline.append(newest.slice(b));
    showFacts();
    olderBtn.hidden = atStart;
    startNote.hidden = !atStart;
    document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight;
    root.dataset.ready = '1';
    performance.mark('sg-session-rendered');
    if (b === newest.length && !atStart) await older();
    io.observe(olderBtn);
    live = api.stream({ ...id, after: maxId, after_seq: maxSeq }, {
      events: onLive,
      state: (st) => app.setLive(st),
      auth: (e) => app.fail(e),
    });
  }
  open().catch((e) => app.fail(e));

  return {
    close() {
      closed = true;
      io.disconnect();
      if (live) live.close();
    },
  };
}
