// What a page's xterm.js terminal (window.sandglassTerm: serve's
// terminal.js, the console's watch.js) shows, for the browser tests
// (browser_terminal.mjs, browser_watch.mjs). A helper, not a test: lib/
// holds no test program (scripts/check-tests-registered.py).

// The terminal's buffer as text, one line a row; '' while the page loads.
export const screen = (page) => page.evaluate(() => {
  const t = window.sandglassTerm, lines = [];
  if (!t) return '';
  const b = t.buffer.active;
  for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
  return lines.join('\n');
});

// Waits until the screen matches re; then pushes what onto steps and
// returns the screen. Throws with the screen past timeoutMs.
export async function waitScreen(page, re, what, steps, timeoutMs = 30000) {
  const t0 = Date.now();
  for (;;) {
    const s = await screen(page);
    if (re.test(s)) { steps.push(what); return s; }
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}; screen:\n${s}`);
    await page.waitForTimeout(50);
  }
}
