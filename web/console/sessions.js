// sessions: every session the read token sees (GET /v1/sessions, page by
// page), filterable by learner, task and state, kept up to date by the
// pushed stream (GET /v1/stream; no polling). Every session has a record
// (a Map from its key); only the rows on screen (and a margin) are in the
// document, in a list as tall as all the rows that pass the filters: a
// thousand sessions cost what a screenful does, to build and to lay out.
// An event updates its session's record, and its row if it is on screen.

import * as api from './api.js';
import { add, el, fmtTime, routeHref, vis, zoneLabel } from './dom.js';

const STATES = ['active', 'aborted', 'destroyed', 'expired'];

function keyOf(r) {
  return `${r.learner}\u0000${r.task}\u0000${r.sandbox}`;
}

function testsWord(s) {
  if (s.last_test_exit === null || s.last_test_exit === undefined) return ['–', 'none'];
  return s.last_test_exit === 0 ? ['passing', 'pass'] : ['failing', 'fail'];
}

const ROW_H = 29; // px, every row (console.css: .sessions .rows > .row)
const MARGIN = 20; // rows drawn above and below the screen
const PAGE = 1000; // sessions a read asks for (the ingest's most a page)

const COLS = ['learner', 'task', 'sandbox', 'state', 'tests', 'commands', 'events', 'started', 'last'];

// One row: its cells, made once, filled by fill(). Rows are grid rows, not
// a <table>'s: off screen, a row is neither laid out nor painted
// (content-visibility), which a table row cannot skip. Each row is a deep
// clone of one template (one native call instead of a dozen element
// creations and attribute sets: 1,000 rows stay fast).
let template = null;

function rowTemplate() {
  if (template) return template;
  template = el('div', 'row');
  template.setAttribute('role', 'row');
  for (const k of COLS) {
    const c = template.appendChild(el('span', `c-${k}`));
    c.setAttribute('role', 'cell');
  }
  // "watch" (its text from console.css: the cell's text stays the id)
  const watch = el('a', 'watch');
  watch.setAttribute('aria-label', 'watch the terminal live');
  watch.title = 'watch the terminal live (read-only)';
  template.children[COLS.indexOf('sandbox')].append(watch, el('a', 'open')); // first: a long id is cut at its end
  return template;
}

function makeRow(s) {
  const tr = rowTemplate().cloneNode(true);
  const c = {};
  const kids = tr.children;
  for (let i = 0; i < COLS.length; i++) c[COLS[i]] = kids[i];
  const a = c.sandbox.lastChild;
  a.textContent = vis(s.sandbox);
  a.href = routeHref('s', s.learner, s.task, s.sandbox);
  // A live sandbox's terminal, watched read-only (watch.html).
  a.previousSibling.href = 'watch.html' + routeHref(s.sandbox);
  c.learner.textContent = vis(s.learner);
  c.task.textContent = vis(s.task);
  return { s, tr, c, a };
}

function fill(row) {
  const { s, c, tr } = row;
  c.state.textContent = s.state;
  c.state.className = `c-state st-${STATES.includes(s.state) ? s.state : 'other'}`;
  const [word, cls] = testsWord(s);
  c.tests.textContent = word;
  c.tests.className = `c-tests t-${cls}`;
  c.commands.textContent = String(s.commands);
  c.events.textContent = String(s.events);
  c.started.textContent = fmtTime(s.started);
  c.started.title = s.started || '';
  c.last.textContent = fmtTime(s.last_activity);
  c.last.title = s.last_activity || '';
  tr.classList.toggle('aborted', s.state === 'aborted');
  c.sandbox.firstChild.hidden = s.state !== 'active';
}

// An event from the stream into its session's summary (as the store
// computes it: store.h, sg_store_sessions). false: already counted.
function apply(s, ev) {
  if (ev.seq < s.events) return false;
  s.events = ev.seq + 1;
  if (!s.last_activity || ev.ts > s.last_activity) s.last_activity = ev.ts;
  if (!s.started || ev.ts < s.started) s.started = ev.ts;
  const p = ev.payload || {};
  if (ev.kind === 'run_result' || ev.kind === 'test_result') s.commands += 1;
  if (ev.kind === 'test_result') s.last_test_exit = Number.isInteger(p.exit_code) ? p.exit_code : null;
  if (ev.kind === 'session_abort') s.aborted = true;
  if (ev.kind === 'sandbox' && (p.state === 'destroyed' || p.state === 'expired')) s.over = p.state;
  if (s.over === undefined && (s.state === 'destroyed' || s.state === 'expired')) s.over = s.state;
  s.state = s.over || (s.aborted ? 'aborted' : 'active');
  return true;
}

export function sessionsPage(root, app) {
  const rows = new Map();
  const learners = new Set();
  const tasks = new Set();
  let pending = [];
  let loaded = false;

  const fLearner = el('input', 'f-learner');
  fLearner.type = 'search';
  fLearner.placeholder = 'learner';
  fLearner.setAttribute('list', 'dl-learners');
  fLearner.setAttribute('aria-label', 'filter by learner');
  const fTask = el('input', 'f-task');
  fTask.type = 'search';
  fTask.placeholder = 'task';
  fTask.setAttribute('list', 'dl-tasks');
  fTask.setAttribute('aria-label', 'filter by task');
  const fState = el('select', 'f-state');
  fState.setAttribute('aria-label', 'filter by state');
  for (const v of ['', ...STATES]) {
    const o = el('option', null, v || 'any state');
    o.value = v;
    fState.append(o);
  }
  const dlL = el('datalist');
  dlL.id = 'dl-learners';
  const dlT = el('datalist');
  dlT.id = 'dl-tasks';
  const count = el('span', 'count', 'loading…');
  const bar = add(el('div', 'filters'), fLearner, fTask, fState, count, dlL, dlT);

  const table = el('div', 'sessions');
  table.id = 'sessions';
  table.setAttribute('role', 'table');
  const head = el('div', 'row head');
  head.setAttribute('role', 'row');
  for (const h of ['Learner', 'Task', 'Sandbox', 'State', 'Tests', 'Commands', 'Events',
    `Started (${zoneLabel()})`, 'Last activity']) {
    const th = el('span', null, h);
    th.setAttribute('role', 'columnheader');
    head.append(th);
  }
  const tbody = el('div', 'rows');
  tbody.setAttribute('role', 'rowgroup');
  const above = el('div', 'spacer');
  const below = el('div', 'spacer');
  add(table, head, tbody);
  add(root, el('h1', null, 'Sessions'), bar, table);

  // The sessions, newest first (order), those that pass the filters
  // (shown), and the window of them on screen (drawn).
  const order = [];
  let shown = [];
  let drawn = [];
  let queued = false;
  function reshow() {
    shown = order.filter((r) => matches(r.s));
    draw();
  }
  function draw() {
    const top = tbody.getBoundingClientRect().top;
    const first = Math.max(0, Math.floor(-top / ROW_H) - MARGIN);
    const last = Math.min(shown.length, Math.ceil((window.innerHeight - top) / ROW_H) + MARGIN);
    const want = shown.slice(first, Math.max(first, last));
    for (const r of want) {
      if (!r.tr) {
        Object.assign(r, makeRow(r.s));
        fill(r);
      } else if (r.stale) {
        fill(r);
      }
      r.stale = false;
    }
    if (want.length !== drawn.length || want.some((r, i) => r !== drawn[i]))
      tbody.replaceChildren(above, ...want.map((r) => r.tr), below);
    drawn = want;
    above.style.height = `${first * ROW_H}px`;
    below.style.height = `${(shown.length - first - want.length) * ROW_H}px`;
  }
  function later() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      draw();
    });
  }
  window.addEventListener('scroll', later, { passive: true });
  window.addEventListener('resize', later, { passive: true });

  // The filters, read once per change (not once per row).
  let want = { l: '', t: '', st: '' };
  function readFilters() {
    want = { l: fLearner.value.trim().toLowerCase(), t: fTask.value.trim().toLowerCase(), st: fState.value };
  }
  function matches(s) {
    const { l, t, st } = want;
    return (!l || s.learner.toLowerCase().includes(l)) && (!t || s.task.toLowerCase().includes(t)) &&
      (!st || s.state === st);
  }

  function showCount() {
    let active = 0;
    for (const r of rows.values()) if (r.s.state === 'active') active++;
    count.textContent = `${shown.length} of ${rows.size} sessions shown · ${active} active`;
  }

  function refilter() {
    readFilters();
    reshow();
    showCount();
  }
  for (const f of [fLearner, fTask]) f.addEventListener('input', refilter);
  fState.addEventListener('change', refilter);

  // The names offered by the filters: gathered as rows come, put into
  // their datalists when a filter is first focused (not while the list
  // is being built).
  let offered = 0;
  function remember(s) {
    learners.add(s.learner);
    tasks.add(s.task);
  }
  function offer() {
    if (offered === learners.size + tasks.size) return;
    for (const [set, dl] of [[learners, dlL], [tasks, dlT]]) {
      const have = new Set(Array.from(dl.children, (o) => o.value));
      const frag = document.createDocumentFragment();
      for (const v of set) {
        if (have.has(v)) continue;
        const o = el('option');
        o.value = v;
        frag.append(o);
      }
      dl.append(frag);
    }
    offered = learners.size + tasks.size;
  }
  for (const f of [fLearner, fTask]) f.addEventListener('focus', offer);

  // A session from a list read: a new row (returned), or what is newer
  // than its row (a row the stream made first) put into it (null).
  // A session from a list read: a new record (returned; the caller puts
  // it in order), or what is newer than its record (one the stream made
  // first) put into it (null).
  function insert(s) {
    const had = rows.get(keyOf(s));
    if (had) {
      if (s.events > had.s.events || (had.s.partial && s.events === had.s.events)) {
        Object.assign(had.s, s, { partial: false });
        had.stale = true;
      }
      return null;
    }
    const r = { s, tr: null, stale: false };
    rows.set(keyOf(s), r);
    remember(s);
    return r;
  }

  function onEvents(evs) {
    if (!loaded) {
      pending.push(...evs);
      return;
    }
    let changed = false;
    for (const ev of evs) {
      let r = rows.get(keyOf(ev));
      if (!r) {
        r = insert({
          learner: ev.learner, task: ev.task, sandbox: ev.sandbox, cursor: ev.id, events: ev.seq,
          started: ev.ts, last_activity: ev.ts, commands: 0, aborted: false, state: 'active',
          last_test_exit: null, partial: true, // its earlier events unseen until a list read
        });
        order.unshift(r);
        changed = true;
      }
      if (apply(r.s, ev)) {
        r.stale = true;
        changed = true;
      }
    }
    if (changed) {
      reshow();
      showCount();
    }
  }

  async function fetchAll() {
    const all = [];
    let after;
    for (;;) {
      const page = await api.get('v1/sessions', { after, limit: PAGE });
      all.push(...page.sessions);
      if (!page.more || !page.sessions.length) return all;
      after = page.sessions[page.sessions.length - 1].cursor;
    }
  }

  // The list and the stream (from now on) start together. What commits
  // between the two comes in both and counts once (a session's events are
  // counted by seq); what commits before the stream's start but after the
  // list was read is in a second read, made once the stream is live. The
  // newest sessions come first, a page of them (one read: 1,000 sessions
  // are one answer, so the list is whole at its first screen), then the
  // older ones page by page down (before=), each page's rows put in their
  // place (newest first, by cursor); a session that begins meanwhile comes
  // by the stream.
  function place(page) {
    let fresh = 0;
    for (const s2 of page.sessions) {
      const r = insert(s2);
      if (r) {
        order.push(r);
        fresh++;
      }
    }
    if (fresh || page.sessions.length) order.sort((a, b) => b.s.cursor - a.s.cursor);
    reshow();
  }
  async function list() {
    let page = await api.get('v1/sessions', { before: 0, limit: PAGE });
    place(page);
    performance.mark('sg-list-fetched');
    loaded = true;
    const buffered = pending;
    pending = [];
    onEvents(buffered);
    showCount();
    root.dataset.ready = '1';
    performance.mark('sg-list-rendered');
    while (page.more && page.sessions.length) {
      const before = page.sessions[page.sessions.length - 1].cursor;
      page = await api.get('v1/sessions', { before, limit: PAGE });
      place(page);
      showCount();
    }
  }

  async function resync() {
    place({ sessions: await fetchAll() });
    showCount();
  }

  const listed = list();
  let wasLive = false;
  const live = api.stream({}, {
    events: onEvents,
    live: () => {
      if (wasLive) return;
      wasLive = true;
      listed.then(resync).catch((e) => app.fail(e));
    },
    state: (st) => app.setLive(st),
    auth: (e) => app.fail(e),
  });
  listed.catch((e) => app.fail(e));

  return {
    close() {
      live.close();
      window.removeEventListener('scroll', later);
      window.removeEventListener('resize', later);
    },
  };
}
