// dom: how the console puts anything on the page. Every byte that comes
// from a learner (ids, commands, output, file names, diffs, test names) is
// hostile: it goes in as text (textContent, text nodes), never as markup,
// and the page's Trusted Types policy makes any HTML sink throw. Names also
// get their invisible and direction-changing characters shown as escapes,
// so "abc\u202Efdp.exe" cannot pass for another name.

// C0/C1 controls, soft hyphen, bidi marks, embeddings, overrides and
// isolates, zero-width characters, word joiner and invisible operators,
// variation selectors, BOM, interlinear annotations, tag characters.
const HIDDEN =
  /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb]|\udb40[\udc00-\udc7f]/g;
// The same for output, where newlines and tabs are the text's own.
const HIDDEN_OUT =
  /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb]|\udb40[\udc00-\udc7f]/g;

function escapeChar(c) {
  const cp = c.codePointAt(0);
  if (cp < 0x100) return '\\x' + cp.toString(16).padStart(2, '0');
  if (cp < 0x10000) return '\\u' + cp.toString(16).padStart(4, '0');
  return '\\u{' + cp.toString(16) + '}';
}

// A name (learner, task, sandbox, path, test): one line, nothing hidden.
export function vis(s) {
  if (s === null || s === undefined) return '';
  return String(s).replace(HIDDEN, escapeChar);
}

// Output and diffs: lines kept, other controls shown (an escape sequence
// shows as \x1b[31m, it does nothing). A CR-LF ends a line; of a line
// redrawn with bare CRs (a progress bar) only its last state shows.
export function visOut(s) {
  if (s === null || s === undefined) return '';
  let t = String(s);
  if (t.includes('\r')) {
    t = t.replace(/\r+\n/g, '\n').split('\n').map((l) => {
      if (!l.includes('\r')) return l;
      const parts = l.split('\r').filter((p) => p !== '');
      return parts.length ? parts[parts.length - 1] : '';
    }).join('\n');
  }
  return t.replace(HIDDEN_OUT, escapeChar);
}

// An element with a class and text (never markup).
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// Appends children (elements or strings, as text) to e; returns e.
export function add(e, ...kids) {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    e.append(typeof k === 'string' ? document.createTextNode(k) : k);
  }
  return e;
}

export function clear(e) {
  while (e.firstChild) e.removeChild(e.firstChild);
  return e;
}

// A link inside the console (a #/ route): built from components, each
// encoded, so no learner's id can make it anything but a fragment.
export function routeHref(...parts) {
  return '#/' + parts.map((p) => encodeURIComponent(String(p))).join('/');
}

function pad(n, w = 2) {
  return String(n).padStart(w, '0');
}

// "2026-12-03 15:18:09" in the browser's zone (its offset in the title).
export function fmtTime(ts) {
  const d = new Date(ts);
  if (!ts || Number.isNaN(d.getTime())) return vis(ts || '');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// The zone the times are shown in: "+01:00".
export function zoneLabel() {
  const off = -new Date().getTimezoneOffset();
  const a = Math.abs(off);
  return `UTC${off < 0 ? '-' : '+'}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
}

export function fmtDuration(s) {
  if (typeof s !== 'number' || !Number.isFinite(s)) return '';
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 1 : 0)} ms`;
  if (s < 60) return `${s.toFixed(2)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

export function fmtBytes(n) {
  if (typeof n !== 'number') return '';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
