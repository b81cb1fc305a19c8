// The teachers' console in a real browser: Debian's chromium driven by
// playwright-core (no browser download). Opens the console the ingest
// serves, checks the token handling, the sessions list (filter, a live
// update), a session (a diff opened, an exec made meanwhile appearing
// live), and a session full of hostile names and output (rendered as
// text, nothing run). Prints one JSON object with what it saw.
//   node browser_console.mjs CHROMIUM_PATH PLAN_JSON
// PLAN: {base, token, scoped_token, learner, sandbox, task, hostile: {learner, task, sandbox},
//        live_cmd: [argv], list_cmd: [argv], marker, screenshots: dir|null}
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const [exe, planJson] = process.argv.slice(2);
const plan = JSON.parse(planJson);
const r = { steps: [], dialogs: 0, console_errors: [], page_errors: [] };

function run(argv) {
  return new Promise((resolve) => {
    const p = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
    p.on('exit', (code) => resolve(code));
  });
}

const browser = await chromium.launch({ executablePath: exe, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  // Counted before any script of the page runs: CSP violations, dialogs.
  await ctx.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const page = await ctx.newPage();
  page.on('dialog', async (d) => { r.dialogs++; await d.dismiss(); });
  page.on('console', (m) => { if (m.type() === 'error') r.console_errors.push(m.text()); });
  page.on('pageerror', (e) => r.page_errors.push(String(e.message || e)));

  // 1. No token: the page asks for one and shows nothing; the API says 401.
  const resp = await page.goto(plan.base);
  r.headers = resp.headers();
  await page.waitForSelector('#token-input', { timeout: 15000 });
  r.no_token_rows = await page.locator('#sessions .rows > .row').count();
  r.no_token_status = await page.evaluate(async () => (await fetch('v1/sessions')).status);
  r.steps.push('asked for a token');
  // A 401 the page provoked on purpose is the only console error allowed.
  await page.waitForTimeout(300);
  r.console_errors = [];

  // 2. The link with the token: it leaves the URL and the history at once.
  await page.goto(`${plan.base}?token=${encodeURIComponent(plan.token)}`);
  r.url_after = page.url();
  r.history_has_token = await page.evaluate(() => location.href.includes('token='));
  await page.waitForSelector('#main[data-ready="1"]', { timeout: 30000 });
  r.steps.push('list');
  const rowsText = await page.locator('#sessions .rows').textContent();
  r.list_has_session = rowsText.includes(plan.sandbox);
  r.list_rows = await page.locator('#sessions .rows > .row').count();

  // Filter by learner.
  await page.fill('.f-learner', plan.learner);
  r.filtered_rows = await page.locator('#sessions .rows > .row:not([hidden])').count();
  r.filtered_all_match = (await page.locator('#sessions .rows > .row:not([hidden]) .c-learner').allTextContents())
    .every((t) => t.includes(plan.learner));
  await page.fill('.f-learner', '');

  // A live update: an exec in the session while the list is open.
  const row = page.locator('#sessions .rows > .row', { hasText: plan.sandbox });
  const before = Number(await row.locator('.c-commands').textContent());
  await page.waitForSelector('#status.live-live', { timeout: 30000 });
  r.list_cmd_rc = await run(plan.list_cmd);
  await page.waitForFunction(([sb, n]) => {
    for (const tr of document.querySelectorAll('#sessions .rows > .row'))
      if (tr.querySelector('.c-sandbox').textContent === sb)
        return Number(tr.querySelector('.c-commands').textContent) > n;
    return false;
  }, [plan.sandbox, before], { timeout: 60000 });
  r.steps.push('list updated live');
  if (plan.screenshots) await page.screenshot({ path: `${plan.screenshots}/console-sessions.png` });

  // 3. The session: by its link.
  await row.locator('a.open').click();
  await page.waitForSelector('#main[data-ready="1"] section.cmd', { timeout: 30000 });
  r.steps.push('session');
  r.session_url = page.url();
  // A diff: closed, then opened, its lines classed.
  const file = page.locator('details.file', { hasText: 'notes.txt (modified)' }).first();
  await file.locator('summary').click();
  await page.waitForSelector('details.file[open] pre.diff-body .dl-add', { timeout: 10000 });
  r.diff_added = await page.locator('details.file[open] pre.diff-body .dl-add').allInnerTexts();
  r.steps.push('diff');
  // Live: an exec made now appears, pushed.
  await page.waitForSelector('#status.live-live', { timeout: 30000 });
  r.live_cmd_rc = await run(plan.live_cmd);
  await page.waitForSelector(`section.cmd:has-text("${plan.marker}") .badge[data-seq]`, { timeout: 60000 });
  r.live_text = await page.locator('section.cmd', { hasText: plan.marker }).last().innerText();
  r.steps.push('live exec');
  if (plan.screenshots) {
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: `${plan.screenshots}/console-session.png` });
  }

  // The ingest restarts (the test does it when told, then runs an exec):
  // the page resumes its stream by itself, no reload, nothing lost.
  if (plan.marker2) {
    await page.evaluate(() => { window.__sameDocument = true; });
    const errorsBefore = r.console_errors.length;
    const lines = createInterface({ input: process.stdin });
    const go = new Promise((res) => lines.once('line', res));
    console.log('RESTART');
    await go;
    lines.close();
    await page.waitForSelector(`section.cmd:has-text("${plan.marker2}") .badge[data-seq]`, { timeout: 90000 });
    r.resumed_same_document = await page.evaluate(() => window.__sameDocument === true);
    r.resumed_markers = await page.locator('section.cmd', { hasText: plan.marker }).count();
    // While the ingest was down the page's reconnection attempts failed: the
    // browser logs each refused connection as a console error. Those, made
    // in this window, are expected; any other error stays counted.
    r.console_errors = r.console_errors.filter((t, i) => i < errorsBefore ||
      !/^Failed to load resource: net::ERR_CONNECTION_(REFUSED|RESET|CLOSED)/.test(t));
    r.steps.push('resumed after a restart');
  }

  // 4. Hostile names and output: text, nothing run.
  const h = plan.hostile;
  await page.evaluate((href) => { location.hash = href; }, `#/s/${[h.learner, h.task, h.sandbox].map(encodeURIComponent).join('/')}`);
  await page.waitForSelector('#main[data-ready="1"] .timeline section.cmd', { timeout: 30000 });
  await page.check('#show-all');
  for (const d of await page.locator('details').all()) await d.evaluate((e) => { e.open = true; });
  for (const b of await page.locator('button.more').all()) await b.click();
  await page.waitForTimeout(500); // anything an injected handler would do, it would do by now
  r.hostile = await page.evaluate(() => {
    const main = document.getElementById('main');
    const text = main.innerText;
    return {
      imgs: document.querySelectorAll('img, iframe, object, embed, svg').length,
      scripts: [...document.scripts].map((s) => s.getAttribute('src')),
      handlers: [...main.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length,
      hrefs: [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href')),
      has_script_text: text.includes('<script>alert(1)</script>'),
      has_img_text: text.includes('"><img src=x onerror=alert(2)>'),
      has_js_url_text: text.includes('javascript:alert(3)'),
      has_bidi_escaped: text.includes('\\u202e'),
      has_zw_escaped: text.includes('\\u200b'),
      has_esc_escaped: text.includes('\\x1b[31m'),
      raw_bidi: text.includes('\u202e'),
      raw_esc: text.includes('\u001b'),
      pwned: !!window.__pwned,
      title: document.title,
    };
  });
  r.csp_violations = await page.evaluate(() => window.__csp);
  r.steps.push('hostile');

  // 5. A scoped token sees its sandbox only.
  const p2 = await ctx.newPage();
  await p2.goto(`${plan.base}?token=${encodeURIComponent(plan.scoped_token)}`);
  await p2.waitForSelector('#main[data-ready="1"]', { timeout: 30000 });
  r.scoped_rows = await p2.locator('#sessions .rows .c-sandbox').allTextContents();
  await p2.close();
  r.steps.push('scoped');

  // 6. Behind a reverse proxy under a path prefix: every link relative.
  const p3 = await ctx.newPage();
  const reqs = [];
  p3.on('request', (q) => reqs.push(q.url()));
  await p3.goto(`${plan.proxy_base}?token=${encodeURIComponent(plan.token)}`);
  await p3.waitForSelector('#main[data-ready="1"]', { timeout: 30000 });
  r.proxy = { rows: await p3.locator('#sessions .rows > .row').count() };
  await p3.waitForSelector('#status.live-live', { timeout: 30000 });
  r.proxy.live = true;
  await p3.locator('#sessions .rows > .row', { hasText: plan.sandbox }).locator('a.open').click();
  await p3.waitForSelector('#main[data-ready="1"] section.cmd', { timeout: 30000 });
  r.proxy.session_cmds = await p3.locator('section.cmd').count();
  r.proxy.requests = reqs;
  await p3.close();
  r.steps.push('behind a proxy');
  r.ok = true;
} catch (e) {
  r.ok = false;
  r.error = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(r));
