// console: the teachers' and operators' web console (docs/CONSOLE.md),
// served by the ingest at /. Two pages, routed by the URL's fragment (so
// any path prefix a reverse proxy adds is left alone):
//   #/                              the sessions
//   #/s/LEARNER/TASK/SANDBOX        one session's timeline
// Nothing is shown without a read token: from a link (/?token=T, moved
// out of the URL at once) or asked for once and kept for this tab.

import * as api from './api.js';
import { add, clear, el, vis } from './dom.js';
import { sessionPage } from './session.js';
import { sessionsPage } from './sessions.js';

api.takeTokenFromUrl();

const main = document.getElementById('main');
const statusEl = document.getElementById('status');
const crumbs = document.getElementById('crumbs');
const forget = document.getElementById('forget');
let page = null;

const LIVE_WORDS = {
  connecting: 'connecting…', connected: 'catching up…', live: 'live', reconnecting: 'reconnecting…',
  auth: 'token refused',
};

const app = {
  setLive(st) {
    statusEl.textContent = LIVE_WORDS[st] || st;
    statusEl.className = `live-${st}`;
  },
  fail(e) {
    if (e instanceof api.AuthError) {
      api.forgetToken();
      askToken(`The ingest refused the token: ${vis(e.message)}`);
      return;
    }
    main.append(el('p', 'error', `Error: ${vis(e && e.message ? e.message : e)}`));
  },
};

function stop() {
  if (page) page.close();
  page = null;
  statusEl.textContent = '';
  statusEl.className = '';
}

function askToken(why) {
  stop();
  clear(main);
  clear(crumbs);
  forget.hidden = true;
  const form = el('form', 'token-form');
  const input = el('input');
  input.type = 'password';
  input.id = 'token-input';
  input.autocomplete = 'off';
  input.spellcheck = false;
  input.required = true;
  const label = el('label', null, 'Read token');
  label.htmlFor = 'token-input';
  const btn = el('button', null, 'Open');
  btn.type = 'submit';
  add(form, el('h1', null, 'sandglass console'),
    el('p', null, 'A read token opens the console: an operator\'s reads every session, one scoped to a ' +
      'learner, task or sandbox reads only those (sandglass token --read).'),
    why ? el('p', 'error', why) : null, label, input, btn);
  form.addEventListener('submit', (e) => {
    e.preventDefault(); // never a navigation: the token stays out of every URL
    if (!input.value.trim()) return;
    api.setToken(input.value);
    route();
  });
  main.append(form);
  input.focus();
}

function route() {
  stop();
  clear(main);
  clear(crumbs);
  if (!api.token()) {
    askToken('');
    return;
  }
  forget.hidden = false;
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter((p) => p !== '');
  let dec;
  try {
    dec = parts.map(decodeURIComponent);
  } catch (_) {
    dec = [];
  }
  const home = el('a', null, 'sessions');
  home.href = '#/';
  crumbs.append(home);
  if (dec[0] === 's' && dec.length === 4) {
    crumbs.append(' / ', el('span', null, `${vis(dec[1])} · ${vis(dec[2])} · ${vis(dec[3])}`));
    document.title = `${vis(dec[1])} · ${vis(dec[2])} — sandglass`;
    page = sessionPage(main, app, dec[1], dec[2], dec[3]);
  } else {
    document.title = 'sessions — sandglass';
    page = sessionsPage(main, app);
  }
}

forget.addEventListener('click', () => {
  api.forgetToken();
  route();
});
window.addEventListener('hashchange', () => {
  route();
  window.scrollTo(0, 0);
});
route();
