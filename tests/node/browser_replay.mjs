// The console's replay page in Debian's chromium (playwright-core):
// test_console_replay.py runs it. Opens replay.html with a token link,
// waits for the player, reads the commands beside it, clicks one and
// reads where the player says it is. Prints one JSON object.
//   node browser_replay.mjs CHROMIUM_PATH PLAN_JSON
// PLAN: {base, token, route: [learner, task, sandbox], click}
import { chromium } from 'playwright-core';

const [exe, planJson] = process.argv.slice(2);
const plan = JSON.parse(planJson);
const out = { ok: false, dialogs: 0, violations: [], page_errors: [] };
let p2 = null;
const browser = await chromium.launch({ executablePath: exe, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  page.on('dialog', async (d) => { out.dialogs++; await d.dismiss(); });
  page.on('pageerror', (e) => out.page_errors.push(String(e)));
  await page.addInitScript(() => {
    window.__violations = [];
    document.addEventListener('securitypolicyviolation',
      (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const route = '#/' + plan.route.map(encodeURIComponent).join('/');
  await page.goto(`${plan.base}replay.html?token=${encodeURIComponent(plan.token)}${route}`);
  await page.waitForSelector('#main[data-ready="1"] #replay-commands', { timeout: 60000 });
  out.url_has_token = page.url().includes('token=');
  // the player's own markers: its control bar draws one per marker
  await page.waitForFunction(() => document.querySelectorAll('#player .ap-marker-container').length > 0,
    null, { timeout: 60000 }).catch(() => {});
  out.player_markers = await page.locator('#player .ap-marker-container').count();
  out.labels = await page.locator('#replay-commands .replay-cmd code').allTextContents();
  out.hostile_elements = await page.locator('#replay-commands img, #main img').count();
  await page.locator(`#replay-commands .replay-cmd[data-marker="${plan.click}"]`).click();
  await page.waitForSelector(`#replay-pos[data-marker="${plan.click}"]`, { timeout: 60000 });
  out.seconds = Number(await page.locator('#replay-pos').getAttribute('data-seconds'));
  out.violations = await page.evaluate(() => window.__violations);

  // From the session's timeline: a command's "replay" link opens the
  // replay seeked to that command.
  p2 = await ctx.newPage();
  p2.on('console', (m) => { if (m.type() === 'error') out.page_errors.push(m.text()); });
  p2.on('pageerror', (e) => out.page_errors.push(String(e)));
  await p2.goto(`${plan.base}?token=${encodeURIComponent(plan.token)}#/s/${plan.route.map(encodeURIComponent).join('/')}`);
  const block = p2.locator('#timeline section.cmd', { hasText: plan.from_timeline }).first();
  await block.locator('a.replay-at').click({ timeout: 60000 });
  await p2.waitForSelector('#replay-pos[data-marker]', { timeout: 60000 });
  out.timeline_marker = Number(await p2.locator('#replay-pos').getAttribute('data-marker'));
  out.timeline_label = await p2.locator('#replay-commands .replay-cmd.current code').textContent();
  out.timeline_links = await p2.evaluate(() => document.location.hash.startsWith('#/'));
  out.ok = true;
} catch (e) {
  out.error = String(e && e.stack || e);
  if (p2) out.error += ` [at ${p2.url()}: ${(await p2.locator('#main').textContent().catch(() => '')).slice(0, 300)}]`;
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
