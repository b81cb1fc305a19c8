// The real asciinema player (npm asciinema-player, which reads asciicast v3)
// plays a recording in Debian's chromium, driven by playwright-core (no
// browser download). A local HTTP server on 127.0.0.1 serves one page, the
// player's bundle and stylesheet from node_modules, and the recording. The
// page plays the recording to its end (fast: speed and idleTimeLimit are
// player options) and this prints one JSON object with what the player did:
//   ok          loaded, played to the end, no error (and `expect` shown)
//   error       the player's error (its core's "error" event), or ours
//   error_overlay  the player shows its error state
//   duration, markers  what the player parsed ("metadata": [time, label])
//   reached     the markers playback crossed (the "marker" events' labels)
//   resizes     the "resize" events ({cols, rows}), in order
//   size        the terminal's size at the end ({cols, rows})
//   screen      the text of the terminal's rows at the end, one per line
//   node cast_player.mjs FILE.cast [CHROMIUM_PATH] [EXPECTED_TEXT]
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { chromium } from 'playwright-core';

const [castPath, exe = '/usr/bin/chromium', expect] = process.argv.slice(2);
const bundle = join(dirname(createRequire(import.meta.url).resolve('asciinema-player')), 'bundle');
const PAGE = `<!doctype html><meta charset="utf-8">
<link rel="stylesheet" href="/player.css"><script src="/player.js"></script>
<body><div id="player"></div><script>
  // Everything the player tells us, read by the driver.
  const seen = window.seen = { markers: null, reached: [], resizes: [], error: null, ended: false };
  const player = window.player = AsciinemaPlayer.create('/rec.cast', document.getElementById('player'),
    { preload: true, speed: 4, idleTimeLimit: 0.1, fit: false, cursorMode: 'steady' });
  player.addEventListener('metadata', (m) => {
    seen.duration = m.duration;
    seen.markers = m.markers;
    player.play();
  });
  player.addEventListener('marker', (m) => seen.reached.push(m.label));
  player.addEventListener('resize', (s) => seen.resizes.push({ cols: s.cols, rows: s.rows }));
  player.addEventListener('error', (e) => { seen.error = (e && e.message) || String(e); });
  player.addEventListener('ended', () => { seen.ended = true; });
</script>`;

const files = {
  '/': ['text/html', () => PAGE],
  '/player.js': ['text/javascript', () => readFileSync(join(bundle, 'asciinema-player.min.js'))],
  '/player.css': ['text/css', () => readFileSync(join(bundle, 'asciinema-player.css'))],
  '/rec.cast': ['text/plain; charset=utf-8', () => readFileSync(castPath)],
};
const server = createServer((req, res) => {
  const f = files[req.url];
  if (!f) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': f[0], 'cache-control': 'no-store' }).end(f[1]());
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));

const result = { ok: false };
const browser = await chromium.launch({ executablePath: exe, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e && e.message || e)));
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  // The end or the failure; generous, as a loaded machine is slow.
  await page.waitForFunction(() => window.seen.ended || window.seen.error, null, { timeout: 120000 });
  // The rows are drawn on the next animation frames after the last output.
  await page.evaluate(() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok))));
  const read = () => page.evaluate(() => {
    const term = document.querySelector('.ap-term');
    const rows = [...document.querySelectorAll('.ap-term-text .ap-line')].map((l) => l.textContent.replace(/\s+$/, ''));
    return {
      seen: window.seen,
      screen: rows.join('\n'),
      size: term && { cols: Number(term.style.getPropertyValue('--term-cols')),
                      rows: Number(term.style.getPropertyValue('--term-rows')) },
      error_overlay: !!document.querySelector('.ap-overlay-error'),
    };
  });
  let r = await read();
  for (const t0 = Date.now(); expect && !r.seen.error && !r.screen.includes(expect) && Date.now() - t0 < 10000;) {
    await page.waitForTimeout(50);
    r = await read();
  }
  // The overlay follows the error event on the UI's next update.
  for (const t0 = Date.now(); r.seen.error && !r.error_overlay && Date.now() - t0 < 10000;) {
    await page.waitForTimeout(50);
    r = await read();
  }
  Object.assign(result, {
    error: r.seen.error, error_overlay: r.error_overlay, ended: r.seen.ended,
    duration: r.seen.duration, markers: r.seen.markers, reached: r.seen.reached,
    resizes: r.seen.resizes, size: r.size, screen: r.screen, page_errors: pageErrors,
  });
  result.ok = !r.seen.error && r.seen.ended && !r.error_overlay && (!expect || r.screen.includes(expect));
} catch (e) {
  result.error = result.error || String(e && e.message || e);
} finally {
  await browser.close();
  server.close();
}
console.log(JSON.stringify(result));
