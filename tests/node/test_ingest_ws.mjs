// Independent peer: Node's `ws` client against the real sandglass ingest.
// Checks the handshake refusals, the acks and the close codes. TAP output.
// Run: node tests/node/test_ingest_ws.mjs (needs `npm install` in tests/node).
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, 'node_modules', 'ws'))) {
  console.log('1..0 # SKIP tests/node/node_modules/ws missing: run npm install in tests/node (scripts/install-deps.sh does)');
  process.exit(0);
}
const { default: WebSocket } = await import('ws');

const BIN = process.env.SANDGLASSD_BIN || 'sandglassd';
const state = mkdtempSync(join(tmpdir(), 'sg-node-'));
const env = { ...process.env, SANDGLASS_CONFIG: 'none', SANDGLASS_STATE_DIR: state };

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

function token(learner, task, sandbox, extra = []) {
  return execFileSync(BIN, ['token', '--learner', learner, '--task', task, '--sandbox', sandbox, ...extra],
    { env }).toString().trim();
}

const ingest = spawn(BIN, ['ingest', '--listen', '127.0.0.1:0'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
// Its stderr, scanned for sanitizer reports once it has exited (and closed it).
let ingestErr = '';
ingest.stderr.on('data', (c) => { ingestErr += c; process.stderr.write(c); });
const port = await new Promise((resolve, reject) => {
  const rl = createInterface({ input: ingest.stdout });
  rl.once('line', (line) => {
    const m = /^listening on ws:\/\/127\.0\.0\.1:(\d+)$/.exec(line);
    m ? resolve(Number(m[1])) : reject(new Error(`unexpected: ${line}`));
  });
  ingest.once('exit', (code) => reject(new Error(`ingest exited ${code}`)));
});
const base = `ws://127.0.0.1:${port}/v1/ingest`;

// Resolves with {status, body} for a refused handshake, or 'open'.
function handshake(url, opts = {}) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, opts);
    ws.on('open', () => { ws.terminate(); resolve({ status: 101 }); });
    ws.on('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    ws.on('error', (e) => resolve({ status: 0, body: String(e) }));
  });
}

// An open connection with a queue of received acks and the close code.
function open(url, opts = {}) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, opts);
    const acks = [];
    const waiters = [];
    ws.closeInfo = null;
    ws.on('message', (data, isBinary) => {
      const v = JSON.parse(data.toString());
      acks.push(v.ack);
      waiters.splice(0).forEach((w) => w());
    });
    ws.on('close', (code, reason) => {
      ws.closeInfo = { code, reason: reason.toString() };
      waiters.splice(0).forEach((w) => w());
    });
    // Generous waits: a loaded machine is slow, not broken.
    ws.waitAck = async (want, ms = 60000) => {
      const end = Date.now() + ms;
      while (Date.now() < end) {
        const hit = acks.find((a) => want === null || a >= want);
        if (hit !== undefined) { acks.length = 0; return hit; }
        if (ws.closeInfo) return undefined;
        await new Promise((r) => { waiters.push(r); setTimeout(r, 50); });
      }
      return undefined;
    };
    ws.waitClose = async (ms = 60000) => {
      const end = Date.now() + ms;
      while (!ws.closeInfo && Date.now() < end) await new Promise((r) => { waiters.push(r); setTimeout(r, 50); });
      return ws.closeInfo;
    };
    ws.event = (seq, extra = {}) => ws.send(JSON.stringify(
      { seq, kind: 'command', payload: { cmd: `echo ${seq}` }, ts: new Date().toISOString(), ...extra }));
    ws.on('open', () => resolve(ws));
    ws.on('error', reject);
  });
}

async function events(sandbox) {
  // reads need a read token (an operator one, from the ingest's secret)
  const readTok = execFileSync(BIN, ['token', '--read'], { env }).toString().trim();
  const r = await fetch(`http://127.0.0.1:${port}/v1/events?sandbox=${sandbox}&limit=1000`,
    { headers: { Authorization: `Bearer ${readTok}` } });
  return (await r.json()).events;
}

try {
  const tok = token('nina', 'task1', 'nodesb');

  let r = await handshake(base);
  check('handshake without token refused with 401', r.status === 401 && /missing token/.test(r.body), JSON.stringify(r));
  r = await handshake(base, { headers: { Authorization: `Bearer ${tok.slice(0, -2)}xx` } });
  check('handshake with a tampered token refused with 401', r.status === 401 && /bad signature/.test(r.body), JSON.stringify(r));
  r = await handshake(`${base}?token=${tok}&learner_id=someone-else&task_id=task1&sandbox_id=nodesb`);
  check('agent URL with foreign learner_id refused with 401', r.status === 401, JSON.stringify(r));
  // A subprotocol the server does not offer must not bypass the token check.
  r = await handshake(base, { protocol: 'http' });
  check('no bypass through the http subprotocol', r.status === 400 || r.status === 401, JSON.stringify(r));
  r = await handshake(base, { protocol: 'sg-ingest' });
  check('the sg-ingest subprotocol still needs the token', r.status === 401, JSON.stringify(r));

  const ws = await open(base, { headers: { Authorization: `Bearer ${tok}` } });
  check('first ack after the handshake is -1', (await ws.waitAck(null)) === -1);
  for (let i = 0; i < 100; i++) ws.event(i);
  check('ack 99 after 100 frames', (await ws.waitAck(99)) === 99);
  for (let i = 0; i < 100; i++) ws.event(i);
  // A sentinel after the replay: its ack comes once every frame before it
  // on this connection (the duplicates too) went through a commit.
  ws.event(100);
  const replayAck = await ws.waitAck(100);
  const stored = (await events('nodesb')).map((e) => e.seq);
  check('replayed frames acked again without duplicates',
    replayAck === 100 && JSON.stringify(stored) === JSON.stringify([...Array(101).keys()]),
    `ack ${replayAck}, ${stored.length} stored`);
  ws.close();

  const ag = await open(`${base}?learner_id=nina&task_id=task1&sandbox_id=nodesb&token=${tok}`);
  check('Python-agent URL form: reconnect sees ack 100', (await ag.waitAck(null)) === 100);
  ag.event(101, { sandbox_id: 'nodesb' });
  check('frame with matching sandbox_id accepted', (await ag.waitAck(101)) === 101);
  ag.close();

  const cases = [
    ['learner_id in frame', (w) => w.event(0, { learner_id: 'x' }), 1008],
    ['foreign sandbox_id', (w) => w.event(0, { sandbox_id: 'other' }), 1008],
    ['invalid JSON', (w) => w.send('{"seq": 0,'), 1007],
    ['duplicate key', (w) => w.send('{"seq":0,"seq":0,"kind":"stdin","payload":{},"ts":"x"}'), 1007],
    ['unknown kind', (w) => w.event(0, { kind: 'nope' }), 1007],
    ['negative seq', (w) => w.event(-3), 1007],
    ['too big', (w) => w.send(JSON.stringify({ seq: 0, kind: 'stdout', ts: 'x', payload: { data: 'x'.repeat(1100000) } })), 1009],
    ['binary message', (w) => w.send(Buffer.from('{"seq":0}'), { binary: true }), 1003],
  ];
  for (const [i, [name, send, want]] of cases.entries()) {
    const t = token('omar', 'task2', `ref${i}`);
    const w = await open(base, { headers: { Authorization: `Bearer ${t}` } });
    await w.waitAck(null);
    send(w);
    const info = await w.waitClose();
    check(`${name}: close code ${want}`, info && info.code === want && info.reason.length > 0, JSON.stringify(info));
  }
} catch (e) {
  check('no exception', false, e.stack);
} finally {
  ingest.kill('SIGTERM');
  // 'close': exited and its stdio closed, so an exit-time report is in
  const code = await new Promise((r) => ingest.once('close', r));
  check('ingest exits 0 on SIGTERM', code === 0, `exit ${code}`);
  const san = ingestErr.split('\n').filter((l) => /Sanitizer|runtime error:/.test(l));
  check('no sanitizer report from the ingest', san.length === 0, san.slice(0, 30).join('\n'));
  rmSync(state, { recursive: true, force: true });
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}
