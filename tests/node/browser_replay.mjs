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
  out.ok = true;
} catch (e) {
  out.error = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
