// The console's figures in headless chromium (bench/bench_console.py runs
// it): the first paint of a large session, the sessions list, and a new
// event from its commit to the screen. Prints one JSON object.
//   node console_bench.mjs CHROMIUM_PATH PLAN_JSON
// PLAN: {base, token, session: [learner, task, sandbox], runs, live: {ws, token, first_seq, n, gap_ms}}
import { chromium } from 'playwright-core';
import WebSocket from 'ws';

const [exe, planJson] = process.argv.slice(2);
const plan = JSON.parse(planJson);
const out = { first_paint_ms: [], list_ms: [], list_rows: 0, session_nodes: 0, live_ms: [], live_ack_ms: [] };

// ms since the navigation began, at the first frame after the page said
// it was ready (its data in the DOM): stamped inside the page (the driver's
// own polling would add its delay on a busy machine).
const stampReady = () => {
  new MutationObserver((muts, obs) => {
    for (const m of muts)
      if (m.target.id === 'main' && m.target.dataset.ready === '1') {
        obs.disconnect();
        requestAnimationFrame(() => setTimeout(() => { window.__painted = performance.now(); }));
      }
  }).observe(document, { attributes: true, attributeFilter: ['data-ready'], subtree: true });
};
async function paintedAt(page, sel) {
  await page.waitForSelector(sel, { timeout: 60000 });
  await page.waitForFunction(() => window.__painted > 0, null, { timeout: 60000 });
  return page.evaluate(() => window.__painted);
}

const browser = await chromium.launch({ executablePath: exe, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await ctx.addInitScript(stampReady);
  const tok = encodeURIComponent(plan.token);
  const route = '#/s/' + plan.session.map(encodeURIComponent).join('/');
  for (let i = 0; i < plan.runs; i++) {
    const page = await ctx.newPage();
    await page.goto(`${plan.base}?token=${tok}${route}`);
    out.first_paint_ms.push(await paintedAt(page, '#main[data-ready="1"] .timeline .segment > *'));
    out.session_nodes = await page.locator('.timeline [data-seq]').count();
    out.session_marks = await page.evaluate(() => performance.getEntriesByType('mark').map((m) => [m.name, Math.round(m.startTime)]));
    await page.close();
    const p2 = await ctx.newPage();
    await p2.goto(`${plan.base}?token=${tok}#/`);
    out.list_ms.push(await paintedAt(p2, '#main[data-ready="1"]'));
    out.list_rows = await p2.locator('#sessions .rows > .row').count();
    // the sessions in the list (only those near the screen are drawn)
    out.list_sessions = Number(((await p2.locator('.filters .count').textContent()) || '').match(/of (\d+) sessions/)?.[1]);
    // scrolled to the end: the oldest session is drawn (the window follows)
    out.list_scroll_end = await p2.evaluate(async () => {
      window.scrollTo(0, document.body.scrollHeight);
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const rows = document.querySelectorAll('#sessions .rows > .row .c-sandbox');
      return rows.length ? rows[rows.length - 1].textContent : null;
    });
    out.list_timeline = await p2.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0];
      return {
        marks: performance.getEntriesByType('mark').map((m) => [m.name, Math.round(m.startTime)]),
        dom_content_loaded: Math.round(nav.domContentLoadedEventEnd),
        resources: performance.getEntriesByType('resource').map((e) =>
          [e.name.split('/').pop().split('?')[0], Math.round(e.startTime), Math.round(e.responseEnd)]),
      };
    });
    await p2.close();
  }

  // Live: the session open and live; events sent one at a time; each
  // one's row time-stamped at the first frame after it entered the page.
  const page = await ctx.newPage();
  await page.addInitScript(() => {
    window.__seen = {};
    new MutationObserver((muts) => {
      for (const m of muts)
        for (const n of m.addedNodes)
          if (n.nodeType === 1 && n.dataset && n.dataset.seq && !(n.dataset.seq in window.__seen)) {
            const s = n.dataset.seq;
            window.__seen[s] = -1;
            requestAnimationFrame(() => { window.__seen[s] = Date.now(); });
          }
    }).observe(document, { childList: true, subtree: true });
  });
  await page.goto(`${plan.base}?token=${tok}${route}`);
  await page.waitForSelector('#main[data-ready="1"]', { timeout: 60000 });
  await page.waitForSelector('#status.live-live', { timeout: 60000 });
  const L = plan.live;
  const ws = new WebSocket(L.ws, 'sg-ingest', { headers: { Authorization: `Bearer ${L.token}` } });
  const acks = new Map();
  await new Promise((res, rej) => { ws.on('open', res); ws.on('error', rej); });
  let ackWait = null;
  ws.on('message', (m) => {
    const a = JSON.parse(String(m)).ack;
    if (typeof a === 'number') {
      acks.set(a, Date.now());
      if (ackWait && a >= ackWait.seq) ackWait.res();
    }
  });
  const sent = {};
  for (let i = 0; i < L.n; i++) {
    const seq = L.first_seq + i;
    const frame = { seq, kind: 'checkpoint', ts: new Date().toISOString(),
      payload: { id: seq.toString(16).padStart(40, '0'), label: `bench ${i}`, files: 1, changed: 0 } };
    const acked = new Promise((res) => { ackWait = { seq, res }; });
    sent[seq] = Date.now();
    ws.send(JSON.stringify(frame));
    await acked;
    await page.waitForFunction((s) => window.__seen[s] > 0, seq, { timeout: 30000, polling: 5 });
    await new Promise((r) => setTimeout(r, L.gap_ms));
  }
  const seen = await page.evaluate(() => window.__seen);
  for (let i = 0; i < L.n; i++) {
    const seq = L.first_seq + i;
    out.live_ms.push(seen[seq] - sent[seq]);
    out.live_ack_ms.push(seen[seq] - acks.get(seq));
  }
  ws.close();
  out.ok = true;
} catch (e) {
  out.ok = false;
  out.error = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
