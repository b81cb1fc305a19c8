// Independent peer: a WHATWG EventSource (npm `eventsource`, the browser's
// API for Node) against the ingest's GET /v1/stream, authorised the way a
// browser must (?token=: EventSource sends no headers of its own). The
// ingest is SIGKILLed (by pid: the one this script started) and restarted
// on the same port mid-stream; EventSource reconnects by itself with
// Last-Event-ID, and what it received must equal the store's rows, in
// order, once. Writers use `ws`. TAP output; every wait is for a condition.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

const here = dirname(fileURLToPath(import.meta.url));
for (const m of ['ws', 'eventsource']) {
  if (!existsSync(join(here, 'node_modules', m))) {
    console.log(`1..0 # SKIP tests/node/node_modules/${m} missing: run npm install in tests/node (scripts/install-deps.sh does)`);
    process.exit(0);
  }
}
const { default: WebSocket } = await import('ws');
const { EventSource } = await import('eventsource');

const BIN = process.env.SANDGLASSD_BIN || 'sandglassd';
const state = mkdtempSync(join(tmpdir(), 'sg-node-sse-'));
const env = { ...process.env, SANDGLASS_CONFIG: 'none', SANDGLASS_STATE_DIR: state };
const T = 120000;

let n = 0;
let failed = 0;
function check(name, cond, diag = '') {
  n++;
  if (cond) console.log(`ok ${n} - ${name}`);
  else {
    failed++;
    console.log(`not ok ${n} - ${name}`);
    for (const l of String(diag).split('\n')) console.log(`#   ${l}`);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(pred, ms = T) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) return true;
    await sleep(20);
  }
  return pred();
}

let ingestErr = '';
function startIngest(port) {
  const p = spawn(BIN, ['ingest', '--listen', `127.0.0.1:${port}`], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  p.stderr.on('data', (c) => { ingestErr += c; });
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: p.stdout });
    rl.once('line', (line) => {
      const m = /^listening on ws:\/\/127\.0\.0\.1:(\d+)$/.exec(line);
      m ? resolve({ proc: p, port: Number(m[1]) }) : reject(new Error(`unexpected: ${line}`));
    });
    p.once('exit', (code) => reject(new Error(`ingest exited ${code}`)));
  });
}

function run(...args) {
  return execFileSync(BIN, args, { env }).toString().trim();
}

// Sends seqs from the stream's first ack + 1 up to count - 1; resolves when
// the last one is acked.
function write(port, tok, count) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/ingest`, { headers: { Authorization: `Bearer ${tok}` } });
    let first = true;
    ws.on('message', (data) => {
      const ack = JSON.parse(data.toString()).ack;
      if (first) {
        first = false;
        for (let i = ack + 1; i < count; i++) {
          ws.send(JSON.stringify({ seq: i, kind: 'stdout', payload: { data: `line ${i}` },
            ts: new Date().toISOString() }));
        }
      }
      if (ack >= count - 1) { ws.close(); resolve(ack); }
    });
    ws.on('error', reject);
  });
}

async function storeRows(port, rtok) {
  const out = [];
  let after = 0;
  for (;;) {
    const r = await fetch(`http://127.0.0.1:${port}/v1/events?task=sse&after_id=${after}&limit=1000`,
      { headers: { Authorization: `Bearer ${rtok}` } });
    const body = await r.json();
    out.push(...body.events);
    if (!body.more) return out;
    after = body.events[body.events.length - 1].id;
  }
}

let ing = await startIngest(0);
const port = ing.port;
const rtok = run('token', '--read');
const got = [];
let errors = 0;
let es;
try {
  es = new EventSource(`http://127.0.0.1:${port}/v1/stream?task=sse&after=0&token=${encodeURIComponent(rtok)}`);
  es.onmessage = (e) => { got.push({ lastEventId: e.lastEventId, ev: JSON.parse(e.data) }); };
  es.onerror = () => { errors++; };
  let live = false;
  es.addEventListener('live', () => { live = true; });
  check('EventSource connects and is told it caught up (event: live)', await waitFor(() => live), es.readyState);

  const tok1 = run('token', '--learner', 'nina', '--task', 'sse', '--sandbox', 'n1');
  await write(port, tok1, 500);
  check('it receives each committed event', await waitFor(() => got.length >= 500), got.length);

  ing.proc.kill('SIGKILL'); // the ingest this script started
  await new Promise((r) => ing.proc.once('exit', r));
  check('the kill ends its connection', await waitFor(() => errors >= 1), errors);
  ing = await startIngest(port);
  const tok2 = run('token', '--learner', 'nina', '--task', 'sse', '--sandbox', 'n2');
  await write(port, tok2, 500);
  await write(port, tok1, 800); // the first stream goes on too
  const want = await storeRows(port, rtok);
  check('EventSource reconnects by itself and resumes', await waitFor(() => got.length >= want.length),
    `${got.length} of ${want.length}`);
  await sleep(200); // not a timing check: a duplicate would show here
  const key = (e) => `${e.id}/${e.sandbox}/${e.seq}`;
  check("its events equal the store's, in order, once",
    JSON.stringify(got.map((g) => key(g.ev))) === JSON.stringify(want.map(key)) && want.length === 1300,
    `${got.length} vs ${want.length}`);
  check('each message\'s lastEventId is its row id', got.every((g) => g.lastEventId === String(g.ev.id)));
} catch (e) {
  check('no exception', false, e.stack);
} finally {
  if (es) es.close();
  ing.proc.kill('SIGTERM');
  await new Promise((r) => (ing.proc.exitCode !== null ? r() : ing.proc.once('exit', r)));
  check('no sanitizer report from the ingest', !/Sanitizer|runtime error:/.test(ingestErr), ingestErr.slice(-2000));
  rmSync(state, { recursive: true, force: true });
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}
