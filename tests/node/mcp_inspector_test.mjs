// Independent client: the official MCP Inspector CLI (npm
// @modelcontextprotocol/inspector) against the real `sandglass mcp`, in the
// default (legacy, initialize) era and in the modern (2026-07-28,
// server/discover + per-request _meta) era. The Inspector needs Node >= 22.19:
// it runs on the node binary of npm's `node@22` package in node_modules.
// TAP output; `1..0 # SKIP` without node_modules.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const node22 = join(here, 'node_modules', 'node', 'bin', 'node');
const inspector = join(here, 'node_modules', '@modelcontextprotocol', 'inspector', 'clients', 'launcher', 'build', 'index.js');
if (!existsSync(node22) || !existsSync(inspector)) {
  console.log('1..0 # SKIP tests/node/node_modules lacks node/bin/node or the Inspector: run npm install in tests/node (scripts/install-deps.sh does)');
  process.exit(0);
}
const ver = spawnSync(node22, ['--version']).stdout?.toString().trim() ?? '';
const [maj, min] = ver.replace(/^v/, '').split('.').map(Number);
if (!(maj > 22 || (maj === 22 && min >= 19))) {
  console.log(`1..0 # SKIP node_modules/node is ${ver || 'not runnable'}; the Inspector needs >= 22.19`);
  process.exit(0);
}

const SANDGLASS = process.env.SANDGLASS_BIN || 'sandglass';
const SANDGLASSD = process.env.SANDGLASSD_BIN || 'sandglassd';
const state = mkdtempSync(join(tmpdir(), 'sg-mcp-insp-'));
// Sanitizer reports of every process (sandglass mcp, its supervisor and
// workers) go to files here, checked at the end; harmless without ASan.
const sanDir = mkdtempSync(join(tmpdir(), 'sg-mcp-insp-san-'));
const sanVars = {};
for (const v of ['ASAN_OPTIONS', 'UBSAN_OPTIONS']) {
  const prev = process.env[v] ? `${process.env[v]}:` : '';
  sanVars[v] = `${prev}log_path=${sanDir}/${v.slice(0, 5).toLowerCase()}`;
}
// Hermetic: the captured sandboxes stream to a loopback port of this
// test's own where nothing listens (a socket bound, not listening, held by
// a child until the end: connections are refused), never to the default
// 127.0.0.1:7433 where an operator's ingest may run (scripts/run.sh).
const holder = spawn('python3', ['-c', 'import socket, sys\ns = socket.socket()\n' +
  's.bind(("127.0.0.1", 0))\nprint(s.getsockname()[1], flush=True)\nsys.stdin.read()'],
{ stdio: ['pipe', 'pipe', 'inherit'] });
const port = await new Promise((res, rej) => {
  holder.stdout.once('data', (d) => res(parseInt(d.toString(), 10)));
  holder.once('error', rej);
});
const ingestUrl = `ws://127.0.0.1:${port}`;
const env = { ...process.env, SANDGLASS_CONFIG: 'none', SANDGLASS_STATE_DIR: state, SANDGLASSD, SANDGLASS_INGEST: ingestUrl, ...sanVars };

let n = 0;
let failed = 0;
function check(name, cond, diag = '') {
  n++;
  if (cond) console.log(`ok ${n} - ${name}`);
  else {
    failed++;
    console.log(`not ok ${n} - ${name}`);
    for (const l of String(diag).split('\n').slice(0, 40)) console.log(`#   ${l}`);
  }
}

// One Inspector CLI run: it spawns `sandglass mcp` (a fresh sandbox) over
// stdio. The Inspector hands a stdio server only a few variables of its own
// environment, so ours go through -e. Runs are independent (each its own
// sandbox): they go JOBS at a time, their checks then made in order.
const JOBS = 4;
let runs = 0; // Inspector runs, each with its own `sandglass mcp` and sandbox
function inspect(era, args) {
  runs++;
  const argv = [inspector, '--cli', '--format', 'json',
    '-e', `SANDGLASS_STATE_DIR=${state}`, '-e', `SANDGLASSD=${SANDGLASSD}`, '-e', `SANDGLASS_INGEST=${ingestUrl}`,
    ...Object.entries(sanVars).flatMap(([k, v]) => ['-e', `${k}=${v}`])];
  if (era) argv.push('--protocol-era', era);
  argv.push(SANDGLASS, 'mcp', '--learner', 'insp', '--task', `era-${era || 'default'}`, ...args);
  return new Promise((resolve) => {
    const c = spawn(node22, argv, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const bufs = { out: [], err: [] };
    c.stdout.on('data', (d) => bufs.out.push(d));
    c.stderr.on('data', (d) => bufs.err.push(d));
    const t = setTimeout(() => c.kill('SIGKILL'), 120000);
    c.on('close', (status) => {
      clearTimeout(t);
      const out = Buffer.concat(bufs.out).toString();
      const err = Buffer.concat(bufs.err).toString();
      let json = null;
      try { json = JSON.parse(out); } catch { /* checked by the caller */ }
      resolve({ status, out, err, json, diag: `exit ${status}\nstdout: ${out.slice(0, 1500)}\nstderr: ${err.slice(-1500)}` });
    });
  });
}

// [era, args, checks(result)] each: the runs JOBS at a time, then each
// run's checks in the list's order.
async function runAll(plan) {
  const results = new Array(plan.length);
  let next = 0;
  const worker = async () => {
    while (next < plan.length) {
      const i = next++;
      results[i] = await inspect(plan[i][0], plan[i][1]);
    }
  };
  await Promise.all(Array.from({ length: JOBS }, worker));
  plan.forEach(([, , checks], i) => checks(results[i]));
}

const text = (res) => (res?.content ?? []).map((c) => c.text ?? '').join('');

try {
  const plan = [];
  for (const era of [null, 'modern']) {
    const tag = era ? `--protocol-era ${era}` : 'default era';
    plan.push([era, ['--method', 'tools/list'], (r) => {
      const tools = r.json?.tools ?? r.json?.result?.tools ?? [];
      const names = tools.map((t) => t.name).sort();
      check(`${tag}: tools/list exits 0`, r.status === 0, r.diag);
      check(`${tag}: tools/list lists the six tools`,
        JSON.stringify(names) === JSON.stringify(['checkpoint', 'edit_file', 'read_file', 'rollback', 'run_bash', 'write_file']), r.diag);
      check(`${tag}: every tool has an object inputSchema`, tools.length > 0 && tools.every((t) => t.inputSchema?.type === 'object'), r.diag);
    }]);
    plan.push([era, ['--method', 'tools/call', '--tool-name', 'run_bash', '--tool-arg', 'command=echo hi'], (r) => {
      const res = r.json?.result ?? r.json;
      check(`${tag}: tools/call run_bash echo hi exits 0`, r.status === 0, r.diag);
      check(`${tag}: run_bash returns the output`, /^hi\n/.test(text(res)) && text(res).includes('[exit code 0]'), r.diag);
      if (era === 'modern')
        check(`${tag}: the modern result carries serverInfo in _meta`,
          res?._meta?.['io.modelcontextprotocol/serverInfo']?.name === 'sandglass', r.diag);
    }]);
    plan.push([era, ['--method', 'tools/call', '--tool-name', 'run_bash', '--tool-arg', 'command=echo oops >&2; exit 3'], (r) => {
      check(`${tag}: a failing command is a tool error (Inspector exit 5)`, r.status === 5 && r.out.includes('exit code 3'), r.diag);
    }]);
    plan.push([era, ['--method', 'tools/call', '--tool-name', 'run_bash', '--tool-args-json',
      JSON.stringify({ command: "printf 'x = 1\\n' > w.txt && cat w.txt" })], (r) => {
      check(`${tag}: --tool-args-json reaches the sandbox`, r.status === 0 && text(r.json?.result ?? r.json).startsWith('x = 1\n'), r.diag);
    }]);
    plan.push([era, ['--method', 'tools/call', '--tool-name', 'no_such_tool'], (r) => {
      check(`${tag}: an unknown tool fails`, r.status !== 0, r.diag);
    }]);
  }
  await runAll(plan);
} finally {
  // Each run left its sandbox for the operator (the session was aborted on EOF).
  try {
    const ls = JSON.parse(execFileSync(SANDGLASS, ['ls', '--json'], { env }).toString());
    check(`each Inspector run left its aborted sandbox in place (${runs} runs)`,
      runs > 0 && ls.length === runs, JSON.stringify(ls).slice(0, 1500));
    const sups = ls.map((sb) => sb.supervisor_pid).filter((p) => p > 0);
    // side by side: each waits out its delivery to the refused port (10 s)
    await Promise.all(ls.map((sb) => new Promise((res) => {
      const c = spawn(SANDGLASS, ['destroy', sb.id], { env, stdio: 'ignore' });
      const t = setTimeout(() => c.kill('SIGKILL'), 60000);
      c.on('exit', () => { clearTimeout(t); res(); });
    })));
    // exit-time leak reports come after destroy answered: wait for each
    // supervisor to be gone (by pid), then read the reports
    const alive = (pid) => {
      try {
        return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ').pop().split(' ')[0] !== 'Z' &&
          readFileSync(`/proc/${pid}/comm`, 'utf8').startsWith('sandglass');
      } catch { return false; }
    };
    const end = Date.now() + 120000;
    while (sups.some(alive) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    check('every supervisor exited after destroy', sups.length === ls.length && !sups.some(alive),
      `${sups.length} supervisors, alive: ${sups.filter(alive)}`);
  } catch (e) {
    check('sandboxes can be listed and destroyed', false, String(e));
  }
  spawnSync(SANDGLASS, ['gc'], { env, timeout: 60000 });
  const reports = readdirSync(sanDir).map((f) => `== ${f}\n${readFileSync(join(sanDir, f), 'utf8').slice(-3000)}`);
  check('no sanitizer report from sandglass mcp, its supervisors or workers', reports.length === 0,
    reports.join('\n'));
  rmSync(state, { recursive: true, force: true });
  rmSync(sanDir, { recursive: true, force: true });
  holder.stdin.end();
}
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
