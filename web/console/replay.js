// replay: a terminal session of a sandbox played by the asciinema player
// (npm asciinema-player, vendored: vendor/asciinema-player.min.js), with
// the session's commands beside it, one per marker the shell's marks left
// in the recording; clicking a command seeks the player to it.
//   replay.html#/LEARNER/TASK/SANDBOX[/SESSION]
// A page of its own (not a route of the console's) for its policy: the
// player compiles WebAssembly and builds its UI from fixed templates with
// innerHTML, which the console's Trusted Types would refuse (see
// src/ingest/ingest_console.c). Learners' bytes go in as text only.

import * as api from './api.js';
import { add, clear, el, fmtBytes, routeHref, vis } from './dom.js';

api.takeTokenFromUrl();

const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');
const statusEl = document.getElementById('status');
let player = null;
let at = { ts: null, cmd: null };

// The route's parts, and ?at= (a command's time: the replay seeks to the
// marker nearest it).
function route() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const q = new URLSearchParams(query || '');
  at = { ts: q.get('at'), cmd: q.get('cmd') };
  const p = path.split('/').filter((x) => x !== '');
  try {
    return p.map(decodeURIComponent);
  } catch (_) {
    return [];
  }
}

// The markers of an asciicast v3 recording: [{time, label}], time in
// seconds from its start (each event's interval is since the one before).
export function castMarkers(text) {
  const out = [];
  let t = 0;
  const lines = text.split('\n');
  for (let i = 1; i < lines.length; i++) {
    if (!lines[i] || lines[i][0] !== '[') continue;
    let ev;
    try {
      ev = JSON.parse(lines[i]);
    } catch (_) {
      continue;
    }
    if (!Array.isArray(ev) || typeof ev[0] !== 'number') continue;
    t += ev[0];
    if (ev[1] === 'm') out.push({ time: t, label: String(ev[2] ?? '') });
  }
  return out;
}

function fmtSec(s) {
  const m = Math.floor(s / 60);
  return `${m}:${(s - m * 60).toFixed(1).padStart(4, '0')}`;
}

function fail(e) {
  if (e instanceof api.AuthError) api.forgetToken();
  main.append(el('p', 'error', `Error: ${vis(e && e.message ? e.message : e)}`));
  if (e instanceof api.AuthError || !api.token()) {
    const a = el('a', null, 'Open the console to give a read token');
    a.href = './#/';
    main.append(el('p', null), a);
  }
}

async function play(learner, task, sandbox, session, list) {
  const text = await api.getText('v1/cast', { learner, task, sandbox, session });
  const markers = castMarkers(text);
  if (player) player.dispose();
  const box = el('div', 'player');
  box.id = 'player';
  const cmds = el('ol', 'replay-commands');
  cmds.id = 'replay-commands';
  const pos = el('span', 'replay-pos');
  pos.id = 'replay-pos';
  const side = add(el('div', 'replay-side'), el('h2', null, `Commands (${markers.length})`), cmds,
    add(el('p', null), 'player at ', pos));
  clear(list.body);
  add(list.body, add(el('div', 'replay-grid'), box, side));
  player = window.AsciinemaPlayer.create({ data: text }, box, { preload: true, fit: 'width' });
  // a seek waits for the player to have read the recording
  const loaded = new Promise((res) => player.addEventListener('metadata', res));
  markers.forEach((m, i) => {
    const b = el('button', 'replay-cmd');
    b.type = 'button';
    b.dataset.marker = String(i);
    add(b, el('span', 'replay-time', fmtSec(m.time)), ' ', el('code', null, vis(m.label)));
    b.addEventListener('click', async () => {
      for (const o of cmds.querySelectorAll('.current')) o.classList.remove('current');
      b.classList.add('current');
      await loaded;
      await player.seek({ marker: i });
      const now = await player.getCurrentTime();
      pos.textContent = fmtSec(now);
      pos.dataset.seconds = String(now);
      pos.dataset.marker = String(i);
    });
    cmds.append(add(el('li'), b));
  });
  const start = (() => {
    try {
      return JSON.parse(text.slice(0, text.indexOf('\n'))).timestamp;
    } catch (_) {
      return undefined;
    }
  })();
  // The command's marker: of those labelled with its line, the nearest
  // its time (the header's start is in whole seconds); else the nearest.
  const off = at.ts && typeof start === 'number' ? Date.parse(at.ts) / 1000 - start : NaN;
  if (markers.length && Number.isFinite(off)) {
    const same = markers.map((m, i) => i).filter((i) => at.cmd !== null && markers[i].label === at.cmd);
    const pool = same.length ? same : markers.map((m, i) => i);
    const best = pool.reduce((b, i) => (Math.abs(markers[i].time - off) < Math.abs(markers[b].time - off) ? i : b));
    cmds.querySelector(`[data-marker="${best}"]`).click();
  }
  main.dataset.ready = '1';
}

async function load() {
  clear(main);
  delete main.dataset.ready;
  const [learner, task, sandbox, want] = route();
  if (!learner || !task || !sandbox) {
    main.append(el('p', 'error', 'No session named: replay.html#/LEARNER/TASK/SANDBOX'));
    return;
  }
  clear(crumbs);
  const back = el('a', null, `${vis(learner)} / ${vis(task)} / ${vis(sandbox)}`);
  back.href = './' + routeHref('s', learner, task, sandbox);
  add(crumbs, back, ' / replay');
  main.append(el('h1', null, 'Replay'));
  if (!api.token()) {
    fail(new api.AuthError('no read token in this tab'));
    return;
  }
  const { casts } = await api.get('v1/casts', { learner, task, sandbox });
  if (!casts.length) {
    main.append(el('p', 'empty', 'No terminal session recorded for this sandbox (sandglass shell, exec -t).'));
    main.dataset.ready = '1';
    return;
  }
  const pick = el('select', 'replay-pick');
  pick.id = 'replay-pick';
  pick.setAttribute('aria-label', 'terminal session');
  for (const c of casts) {
    const o = el('option', null, `session ${vis(c.session)} (${fmtBytes(c.bytes)})`);
    o.value = c.session;
    pick.append(o);
  }
  const chosen = casts.find((c) => c.session === want) || casts[casts.length - 1];
  pick.value = chosen.session;
  const list = { body: el('div', 'replay-body') };
  add(main, add(el('p', null), pick), list.body);
  pick.addEventListener('change', () => {
    history.replaceState(null, '', '#' + routeHref(learner, task, sandbox, pick.value).slice(1));
    play(learner, task, sandbox, pick.value, list).catch(fail);
  });
  statusEl.textContent = '';
  await play(learner, task, sandbox, chosen.session, list);
}

window.addEventListener('hashchange', () => load().catch(fail));
load().catch(fail);
