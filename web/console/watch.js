// watch: a learner's terminal, live and read-only.
//   watch.html#/SANDBOX
// The ingest mints a watch token for the console's read token (GET
// /v1/watch: a minute's token for that one sandbox, and the sandbox
// hosts' `sandglass serve` addresses); the page opens serve's terminal
// WebSocket with it (src/wire/termws.h: AUTH, then only what the terminal
// prints comes; serve refuses any key or resize a watcher sends, and this
// page sends none). The serves are tried in the order the ingest gives
// (first the one the sandbox's host registered, when the ingest lists it):
// one that does not hold the sandbox refuses it at once, one that cannot
// be reached is passed over. The learner's
// bytes go only to xterm.js (vendor/, from npm), never into the page's
// HTML; the page may connect to the ingest and those serves only (its
// Content-Security-Policy, src/ingest/ingest_watch.c).

import * as api from './api.js';
import { add, el, vis } from './dom.js';

api.takeTokenFromUrl();

const crumbs = document.getElementById('crumbs');
const statusEl = document.getElementById('status');
const say = (s) => { statusEl.textContent = s; };

function sandboxOf() {
  const p = location.hash.replace(/^#\/?/, '').split('/').filter((x) => x !== '');
  try {
    return p.length === 1 ? decodeURIComponent(p[0]) : '';
  } catch (_) {
    return '';
  }
}

const term = new Terminal({ disableStdin: true, cursorBlink: false, scrollback: 5000, convertEol: false });
const fit = new FitAddon.FitAddon();
term.loadAddon(fit);
term.open(document.getElementById('term'));
fit.fit();
window.sandglassTerm = term; // for tests: the screen's text
window.addEventListener('resize', () => fit.fit());

// One serve after another until one holds the sandbox. serve says why it
// closes in an {"error"} message first (a browser may not pass on a
// close's reason).
function watch(w, i) {
  if (i >= w.serves.length) {
    // the store names the sandbox's host and its serve, but not one the
    // ingest lists (--serve): this page may not connect to it
    say(typeof w.unlisted === 'string'
      ? `no serve this ingest names holds this sandbox: its host ${vis(String(w.host || '?'))} serves at ` +
        `${vis(w.unlisted)}, which the ingest does not list (--serve)`
      : 'no serve holds this sandbox');
    return;
  }
  const ws = new WebSocket(w.serves[i].replace(/^http/, 'ws') + '/v1/terminal', 'sandglass-terminal');
  ws.binaryType = 'arraybuffer';
  let opened = false; // the connection was made: a serve answers there
  let held = false;  // the serve took the token: output came
  let ended = '';    // the learner's shell ended: that stays the status
  let why = '';      // serve's last {"error"}
  ws.onopen = () => {
    opened = true;
    ws.send(JSON.stringify({ token: w.token, rows: term.rows, cols: term.cols }));
    say('watching (read-only)');
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') {
      held = true;
      term.write(new Uint8Array(ev.data));
      return;
    }
    let m = {};
    try {
      m = JSON.parse(ev.data);
    } catch (_) { /* not the protocol's: ignored */ }
    if ('exit' in m) ended = `the learner's terminal ended (exit ${Number(m.exit) | 0})`;
    else if (typeof m.error === 'string') why = m.error;
    say(ended || vis(why));
  };
  ws.onclose = (ev) => {
    // the next serve when this one is not there or does not hold the sandbox
    if (!held && (!opened || /no such sandbox on this host/.test(why || ev.reason || ''))) {
      watch(w, i + 1);
      return;
    }
    say(ended || `closed: ${vis(why || ev.reason || 'the connection ended')}`);
  };
}

async function main() {
  const sandbox = sandboxOf();
  if (!sandbox) {
    say('no sandbox: open this page as watch.html#/SANDBOX');
    return;
  }
  add(crumbs, el('a', null, 'sessions'), ' / ', el('span', 'sandbox', vis(sandbox)), ' / watch');
  crumbs.firstChild.href = './#/';
  if (!api.token()) {
    say('no read token: open the console first (it asks for one)');
    return;
  }
  let w;
  try {
    w = await api.get('v1/watch', { sandbox });
  } catch (e) {
    say(vis(e.message));
    return;
  }
  if (!w || typeof w.token !== 'string' || !Array.isArray(w.serves)) {
    say('the ingest answered without a watch token');
    return;
  }
  say('connecting');
  watch(w, 0);
}

main();
