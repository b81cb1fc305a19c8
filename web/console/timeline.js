// timeline: a session's events as a story (what `sandglass events` prints,
// docs/CLI.md): each command one block with its status, duration, test
// counts and failing tests, and under it what it changed (diffs, opened on
// demand) and printed; checkpoints, rollbacks, aborts, limits and sandbox
// changes as sentences. The plumbing (activity, process, stdin, the
// checkpoint before each command) is there but hidden unless asked for.
//
// Events come in segments: the newest first, older ones put above it as
// the reader scrolls up, new ones appended as they commit. A segment
// always starts at a boundary (a command, or an event that stands alone):
// the events before a page's first boundary wait for the page above, so
// no command is ever split between two segments.

import { add, el, fmtBytes, fmtDuration, fmtTime, vis, visOut } from './dom.js';

const OUT_LINES = 20;
const OUT_BYTES = 4096;
const FAILING_SHOWN = 50;

const isResult = (k) => k === 'run_result' || k === 'test_result';

// Shown only with "show everything" (as `events --all`).
export function isPlumbing(ev) {
  const k = ev.kind;
  if (k === 'activity' || k === 'process' || k === 'stdin' || k === 'command') return true;
  const p = ev.payload || {};
  return k === 'checkpoint' && !p.error && typeof p.label === 'string' &&
    (p.label.startsWith('before exec ') || p.label.startsWith('before shell command '));
}

// Whether ev starts something of its own (see the file's comment).
export function isBoundary(ev) {
  const k = ev.kind;
  if (k === 'command') return true;
  return !(k === 'stdout' || k === 'file_diff' || isResult(k) || isPlumbing(ev));
}

function timeEl(ev) {
  const t = el('time', 'ts', fmtTime(ev.ts));
  t.dateTime = typeof ev.ts === 'string' ? ev.ts : '';
  t.title = `${ev.ts || ''} · seq ${ev.seq}`;
  return t;
}

function firstLine(s) {
  const t = String(s ?? '');
  const i = t.indexOf('\n');
  return i < 0 ? t : t.slice(0, i);
}

// Output text: the first OUT_LINES lines / OUT_BYTES, the rest on demand.
function outputEl(ev) {
  const p = ev.payload || {};
  const err = p.stream === 'stderr';
  const box = el('div', `out ${err ? 'stderr' : 'stdout'}`);
  box.dataset.seq = ev.seq;
  const data = visOut(p.data);
  if (p.truncated && typeof p.bytes === 'number')
    box.append(el('div', 'note', `… its first ${fmtBytes(Math.max(0, p.bytes - String(p.data || '').length))} were not kept (the last 64 KiB are)`));
  const lines = data.split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  let shown = lines.slice(0, OUT_LINES).join('\n');
  if (shown.length > OUT_BYTES) shown = shown.slice(0, OUT_BYTES);
  const pre = el('pre', null, shown);
  box.append(pre);
  if (shown.length < lines.join('\n').length) {
    const more = el('button', 'more',
      `show all (${lines.length} lines, ${fmtBytes(data.length)})`);
    more.type = 'button';
    more.addEventListener('click', () => {
      pre.textContent = lines.join('\n');
      more.remove();
    });
    box.append(more);
  }
  return box;
}

function diffLineClass(l) {
  if (l.startsWith('+++') || l.startsWith('---') || l.startsWith('diff ') || l.startsWith('index ') ||
    l.startsWith('new file') || l.startsWith('deleted file') || l.startsWith('similarity') ||
    l.startsWith('rename ') || l.startsWith('old mode') || l.startsWith('new mode') || l.startsWith('\\'))
    return 'dl-meta';
  if (l.startsWith('@@')) return 'dl-hunk';
  if (l.startsWith('+')) return 'dl-add';
  if (l.startsWith('-')) return 'dl-del';
  return 'dl-ctx';
}

// A unified diff as lines, each coloured by its class (CSS), as text.
export function renderDiff(diff) {
  const pre = el('pre', 'diff-body');
  const frag = document.createDocumentFragment();
  const lines = visOut(diff).split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  for (const l of lines) frag.append(el('span', diffLineClass(l), l + '\n'));
  pre.append(frag);
  return pre;
}

function diffCounts(p) {
  if (p.binary || p.truncated) return null;
  if (typeof p.added === 'number') return [p.added, p.removed || 0];
  let a = 0;
  let r = 0;
  for (const l of String(p.diff || '').split('\n')) {
    if (l.startsWith('+') && !l.startsWith('+++')) a++;
    else if (l.startsWith('-') && !l.startsWith('---')) r++;
  }
  return [a, r];
}

// A file change: "+3 −1 path (modified)"; the diff when opened.
function fileDiffEl(ev) {
  const p = ev.payload || {};
  const d = el('details', `file change-${['created', 'modified', 'deleted', 'renamed'].includes(p.change) ? p.change : 'other'}`);
  d.dataset.seq = ev.seq;
  const s = el('summary');
  const counts = diffCounts(p);
  if (counts)
    add(s, el('span', 'plus', `+${counts[0]}`), ' ', el('span', 'minus', `−${counts[1]}`), ' ');
  if (p.old_path !== undefined && p.old_path !== null)
    add(s, el('span', 'path old', vis(p.old_path)), ' → ');
  add(s, el('span', 'path', vis(p.path ?? '?')), ' ',
    el('span', 'change', `(${vis(p.change || 'changed')}${p.binary ? ', binary' : ''}${p.truncated ? ', no diff: large' : ''})`));
  if (p.path_hex || p.old_path_hex) s.append(el('span', 'note', ' name is not UTF-8'));
  d.append(s);
  d.addEventListener('toggle', () => {
    if (!d.open || d.dataset.rendered) return;
    d.dataset.rendered = '1';
    if (typeof p.diff === 'string' && p.diff) d.append(renderDiff(p.diff));
    else d.append(el('div', 'note', p.binary ? 'binary file: no diff' : p.truncated ? 'too large for a diff' : 'no textual change'));
    const facts = [];
    if (typeof p.size === 'number') facts.push(`size ${fmtBytes(p.size)}`);
    if (typeof p.sha256 === 'string') facts.push(`sha256 ${vis(p.sha256)}`);
    if (facts.length) d.append(el('div', 'note', facts.join(' · ')));
  });
  return d;
}

function detailsJson(title, obj) {
  const d = el('details', 'facts');
  d.append(el('summary', null, title));
  d.append(el('pre', null, visOut(JSON.stringify(obj, null, 2))));
  return d;
}

function s(v) {
  return vis(v === undefined || v === null ? '?' : v);
}

function shortId(id) {
  return vis(String(id ?? '?').slice(0, 12));
}

// A standalone event as a sentence, with its facts on demand.
function sentence(ev) {
  const p = ev.payload || {};
  const k = ev.kind;
  let text;
  let loud = false;
  let facts = null;
  if (k === 'checkpoint') {
    text = p.error ? `checkpoint "${s(p.label)}" failed: ${s(p.error)}`
      : `checkpoint ${shortId(p.id)} "${s(p.label)}": ${p.files ?? 0} files, ${p.changed ?? 0} changed` +
        (p.not_stored ? ' (some files not stored)' : '');
  } else if (k === 'rollback') {
    text = `rolled back to checkpoint ${shortId(p.to)}: ${p.changed ?? 0} files changed` +
      (Array.isArray(p.killed) && p.killed.length ? ', processes killed' : '');
    if (Array.isArray(p.changes) && p.changes.length) {
      facts = el('details', 'facts');
      facts.append(el('summary', null, `${p.changes.length} changes`));
      const ul = el('ul', 'changes');
      for (const c of p.changes.slice(0, 500))
        ul.append(el('li', null, `${s(c && c.change)} ${s(c && c.path)}`));
      facts.append(ul);
    }
  } else if (k === 'session_abort') {
    loud = true;
    const r = typeof p.reason === 'string' ? p.reason : '?';
    const named = typeof p.by === 'string' && r.startsWith(`${p.by}:`);
    text = `SESSION ABORTED${named ? '' : ` (by ${s(p.by)})`}: ${vis(r)}${p.already ? ' (already aborted)' : ''}`;
    const proof = p.proof || {};
    const bits = [];
    if ('processes_left' in proof) bits.push(`${proof.processes_left} processes left`);
    if ('cgroup_holds_only_init' in proof) bits.push(`cgroup holds only init: ${proof.cgroup_holds_only_init ? 'yes' : 'NO'}`);
    if (typeof proof.kill_ms === 'number') bits.push(`killed in ${proof.kill_ms.toFixed(1)} ms`);
    if (bits.length) text += ` — proof: ${bits.join(', ')}`;
    facts = detailsJson('proof and caps', { proof: p.proof, caps: p.caps, execs_killed: p.execs_killed, processes_killed: p.processes_killed });
  } else if (k === 'sandbox') {
    text = `sandbox ${s(p.state)}${p.reason ? `: ${vis(p.reason)}` : ''}`;
    if (p.limits && typeof p.limits === 'object') {
      const l = p.limits;
      const bits = [];
      if (typeof l.memory === 'number') bits.push(`memory ${fmtBytes(l.memory)}`);
      if (typeof l.pids === 'number') bits.push(`${l.pids} pids`);
      if (typeof l.cpus === 'number') bits.push(`${l.cpus} cpus`);
      if (typeof l.timeout_s === 'number') bits.push(`${l.timeout_s} s per exec`);
      if (bits.length) text += ` (${bits.join(', ')})`;
    }
    if (p.proof) facts = detailsJson('proof', p.proof);
  } else if (k === 'limit') {
    loud = true;
    const v = p.value !== undefined ? `, value ${vis(JSON.stringify(p.value))}` : '';
    const l = p.limit !== undefined ? `, limit ${vis(JSON.stringify(p.limit))}` : '';
    text = `limit reached: ${s(p.what)}${p.state ? ` ${vis(p.state)}` : ''}${v}${l}${p.cmd ? ` — $ ${vis(firstLine(p.cmd))}` : ''}`;
  } else if (k === 'bulk') {
    // the changes past the per-exec limit: one line, every file listed below it
    const files = Array.isArray(p.files) ? p.files : [];
    text = `${files.length} more files changed (past the limit of ${Number.isInteger(p.limit) ? p.limit : '?'})`;
    facts = el('details', 'facts');
    add(facts, el('summary', null, 'files'),
      el('pre', null, files.map((f) => `${vis(String(f.change))} ${vis(String(f.path))}${f.old_path !== undefined ? ` (from ${vis(String(f.old_path))})` : ''}${Number.isInteger(f.size) ? ` ${f.size} B` : ''}`).join('\n')));
  } else if (k === 'stdin') {
    text = `typed ${vis(firstLine(p.line))}`;
  } else if (k === 'command') {
    text = `command ${vis(firstLine(p.cmd))}`;
  } else if (k === 'activity') {
    const n = p.spooled ?? p.unacked;
    text = `activity ${s(p.state)}${typeof n === 'number' ? ` (${n} unacked)` : ''}`;
  } else if (k === 'process') {
    const argv = Array.isArray(p.argv) ? p.argv.map((a) => vis(a)).join(' ') : '(argv unknown)';
    const how = Number.isInteger(p.exit_code) ? `exit ${p.exit_code}` : Number.isInteger(p.signal) ? `signal ${p.signal}` : p.running_at_end ? 'running at end' : p.replaced ? 'replaced' : '';
    text = `process ${p.pid ?? '?'} ${argv}${how ? ` → ${how}` : ''}${typeof p.duration_s === 'number' ? `, ${fmtDuration(p.duration_s)}` : ''}${p.background ? ' (background)' : ''}`;
  } else {
    text = `${vis(k)} ${visOut(JSON.stringify(p)).slice(0, 300)}`;
  }
  const row = el('div', `ev ev-${/^[a-z_]+$/.test(k) ? k : 'other'}${loud ? ' loud' : ''}${isPlumbing(ev) ? ' plumb' : ''}`);
  row.dataset.seq = ev.seq;
  add(row, timeEl(ev), el('span', 'what', text), facts);
  return row;
}

function statusOf(p) {
  if (p.timed_out) return 'timed out';
  if (Number.isInteger(p.exit_code)) return `exit ${p.exit_code}`;
  if (Number.isInteger(p.signal)) return `killed by signal ${p.signal}`;
  return 'no exit status';
}

// A test result's verdict ("tests FAIL 1 passed, 1 failed"), and whether
// it passed.
function testVerdict(p, exitOk) {
  if (p.parsed !== true || typeof p.outcome !== 'string')
    return [exitOk ? 'tests PASS' : 'tests FAIL', exitOk];
  const ok = p.outcome === 'passed';
  const word = ok ? 'PASS' : p.outcome === 'no_tests' ? 'NONE RAN' : p.outcome === 'error' ? 'ERROR' : 'FAIL';
  const counts = [];
  for (const c of ['passed', 'failed', 'errors', 'skipped']) {
    const n = Number.isInteger(p[c]) ? p[c] : 0;
    if (n > 0 || c === 'passed') counts.push(`${n} ${c}`);
  }
  return [`tests ${word} ${counts.join(', ')}`, ok];
}

// A command: its line, then (as they come) its output and changes, then
// its result.
class Block {
  constructor(cmdEv, replayHref) {
    this.el = el('section', 'cmd running');
    this.head = el('div', 'cmd-head');
    this.line = el('code', 'cmdline');
    this.badge = el('span', 'badge', cmdEv ? 'running…' : '');
    this.dur = el('span', 'dur');
    this.body = el('div', 'cmd-body');
    if (cmdEv) {
      this.el.dataset.seq = cmdEv.seq;
      this.setCmd((cmdEv.payload || {}).cmd);
      this.head.append(timeEl(cmdEv));
    }
    add(this.head, this.line, this.badge, this.dur);
    // A command typed in a recorded terminal: the replay, seeked to it.
    const href = cmdEv && replayHref ? replayHref(cmdEv) : null;
    if (href) {
      const a = el('a', 'replay-at', '▶ replay');
      a.href = href;
      a.title = 'play the terminal from this command';
      this.head.append(a);
    }
    add(this.el, this.head, this.body);
  }

  setCmd(cmd) {
    const c = String(cmd ?? '');
    this.line.textContent = `$ ${vis(firstLine(c))}${c.includes('\n') ? ' …' : ''}`;
    this.line.title = visOut(c);
  }

  take(ev) {
    if (ev.kind === 'stdout') {
      if ((ev.payload || {}).data) this.body.append(outputEl(ev));
    } else if (ev.kind === 'file_diff') {
      let files = this.files;
      if (!files) {
        files = this.files = el('div', 'files');
        this.body.prepend(files);
      }
      files.append(fileDiffEl(ev));
    } else {
      this.body.append(sentence(ev)); // plumbing under its command
    }
  }

  finish(res) {
    const p = res.payload || {};
    if (!this.el.dataset.seq) {
      this.el.dataset.seq = res.seq;
      this.head.prepend(timeEl(res));
      this.setCmd(p.cmd);
    }
    this.el.classList.remove('running');
    this.badge.dataset.seq = res.seq;
    let ok = Number.isInteger(p.exit_code) && p.exit_code === 0;
    let text = statusOf(p);
    if (res.kind === 'test_result') {
      const [v, vok] = testVerdict(p, ok);
      ok = vok;
      text = `${v} · ${text}`;
      this.el.classList.add('test');
    }
    this.badge.textContent = text;
    this.el.classList.add(ok ? 'ok' : 'fail');
    this.dur.textContent = fmtDuration(p.duration_s);
    const notes = [];
    if (p.killed_by && p.killed_by.detail) notes.push(vis(p.killed_by.detail));
    if (p.oom_killed) notes.push('out of memory');
    if (p.pids_limit_hit) notes.push('process limit hit');
    if (p.output_limit_hit) notes.push('output limit hit');
    if (notes.length) this.head.append(el('span', 'note', notes.join(' · ')));
    if (res.kind === 'test_result' && Array.isArray(p.failing_tests) && p.failing_tests.length) {
      const ul = el('ul', 'failing');
      for (const n of p.failing_tests.slice(0, FAILING_SHOWN)) ul.append(el('li', null, vis(n)));
      if (p.failing_tests_truncated || p.failing_tests.length > FAILING_SHOWN) ul.append(el('li', 'note', 'and more'));
      this.body.prepend(ul);
    }
  }
}

// One run of events rendered together; ctx.open is its command awaiting
// its result.
function renderInto(parent, evs, ctx) {
  for (const ev of evs) {
    const k = ev.kind;
    if (ctx.open && (k === 'stdout' || k === 'file_diff')) {
      ctx.open.take(ev);
      continue;
    }
    if (isResult(k)) {
      const b = ctx.open || new Block(null);
      if (!ctx.open) parent.append(b.el);
      b.finish(ev);
      ctx.open = null;
      continue;
    }
    if (isPlumbing(ev) && k !== 'command') {
      if (ctx.open) ctx.open.take(ev);
      else parent.append(sentence(ev));
      continue;
    }
    ctx.open = null; // a command without a result stays "running…" (or never ended)
    if (k === 'command') {
      ctx.open = new Block(ev, ctx.replayHref);
      parent.append(ctx.open.el);
      continue;
    }
    if (k === 'stdout') parent.append(outputEl(ev));
    else if (k === 'file_diff') parent.append(fileDiffEl(ev));
    else parent.append(sentence(ev));
  }
}

export class Timeline {
  // replayHref(commandEvent): a link to the replay at that command, or null.
  constructor(container, replayHref) {
    this.el = container;
    this.replayHref = replayHref || null;
    this.last = null; // the newest segment: {el, ctx}
  }

  // An older segment (starting at a boundary) above the others.
  prepend(evs) {
    const seg = { el: el('div', 'segment'), ctx: { open: null, replayHref: this.replayHref } };
    renderInto(seg.el, evs, seg.ctx);
    const first = this.el.querySelector(':scope > .segment');
    this.el.insertBefore(seg.el, first);
    if (!this.last) this.last = seg;
    return seg.el;
  }

  // Newer events at the end (the live ones).
  append(evs) {
    if (!this.last) {
      this.last = { el: el('div', 'segment'), ctx: { open: null, replayHref: this.replayHref } };
      this.el.append(this.last.el);
    }
    renderInto(this.last.el, evs, this.last.ctx);
  }
}
