// A real browser at the learner's terminal: Debian's chromium, driven by
// playwright-core (no browser download), opens the page `sandglass serve`
// serves, waits for the prompt, types commands, resizes the window and
// reads what the terminal shows. Returns one object with what it saw.
// A case of browser_cases.mjs (the browser is its): {"module":
// "browser_terminal.mjs", "args": [URL_WITH_TOKEN]}.
import { waitScreen as waitOn } from './lib/xterm_screen.mjs';

export default async function (context, url) {
  const result = { steps: [] };
  const waitScreen = (page, re, what, ms) => waitOn(page, re, what, result.steps, ms);
  try {
    const page = await context.newPage();
    await page.setViewportSize({ width: 900, height: 500 });
    const resp = await page.goto(url);
    result.headers = resp.headers();
    await waitScreen(page, /sandbox@\S*:\/workspace\$ $/m, 'prompt');
    // The token left the address bar (and so the history entry) at load.
    result.url_after = await page.evaluate(() => location.href);
    await page.locator('.xterm-helper-textarea').focus();
    await page.keyboard.type('/bin/echo browser-$((6*7)); stty size\n');
    const s1 = await waitScreen(page, /^browser-42$[\s\S]*^\d+ \d+$/m, 'command output');
    result.size_before = s1.match(/^(\d+ \d+)$/m)[1];
    await page.setViewportSize({ width: 1200, height: 700 });
    await page.waitForTimeout(300); // the fit addon resizes on the window's resize event
    await page.keyboard.type('echo size=$(stty size)\n');
    const s2 = await waitScreen(page, /^size=\d+ \d+$/m, 'size after resize');
    result.size_after = s2.match(/^size=(\d+ \d+)$/m)[1];
    await page.keyboard.type('exit 7\n');
    await page.waitForFunction(() => /the shell ended \(7\)/.test(document.getElementById('status').textContent),
                               null, { timeout: 30000 });
    result.steps.push('exit');
    result.status = await page.locator('#status').textContent();
    // Another page that frames the terminal page: the browser refuses to
    // show it there (frame-ancestors 'none'), so no site can lay itself
    // over a learner's terminal.
    const other = await context.newPage();
    await other.setContent(`<iframe src="${new URL('/', url).href}"></iframe>`);
    const frame = await (await other.waitForSelector('iframe')).contentFrame();
    await frame.waitForLoadState('load');
    result.framed = await frame.evaluate(() => !!document.getElementById('term')).catch(() => false);
    result.ok = true;
  } catch (e) {
    result.ok = false;
    result.error = String(e && e.message || e);
  }
  return result;
}
