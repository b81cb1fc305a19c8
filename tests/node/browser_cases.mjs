// One Debian chromium (driven by playwright-core) for all of a test
// program's browser cases: launched once, each case then in a browser
// context of its own (its own pages, cookies and storage), one after the
// other as the test asks for them.
//   node browser_cases.mjs CHROMIUM_PATH
// Reads one JSON line per case from stdin, {"module": "browser_terminal.mjs",
// "args": [...]}: the module (in this directory) exports a default async
// function (context, ...args) returning the case's result object; prints
// "RESULT " and that object as JSON on one line ({"ok": false, "error"}
// when the case threw). At the end of stdin the browser is closed.
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const [exe] = process.argv.slice(2);
const launched = chromium.launch({ executablePath: exe, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
launched.catch(() => {}); // reported by the first case that needs it

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let result;
  let ctx = null;
  try {
    const { module, args } = JSON.parse(line);
    if (!/^[a-z_]+\.mjs$/.test(module)) throw new Error(`not a case module of tests/node: ${module}`);
    const run = (await import(`./${module}`)).default;
    ctx = await (await launched).newContext();
    result = await run(ctx, ...(args || []));
  } catch (e) {
    result = { ok: false, error: String(e && e.stack || e) };
  } finally {
    if (ctx) await ctx.close().catch(() => {});
  }
  console.log('RESULT ' + JSON.stringify(result));
}
await (await launched.catch(() => null))?.close();
process.exit(0);
