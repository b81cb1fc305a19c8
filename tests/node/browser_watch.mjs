// A teacher watches a learner's terminal in a real browser (Debian's
// chromium, driven by playwright-core): the learner's page at `sandglass
// serve`; the console at the ingest, its list's "watch" link of the
// sandbox, and the watch page it opens (watch.html, which asks the ingest
// for a watch token and connects to serve with it). The watch
// page must show what the learner's terminal shows, live; keys typed into
// it must reach nothing; the learner's page must say it is watched; the
// page must load nothing from elsewhere and break no policy. Returns one
// object with what it saw. A case of browser_cases.mjs (the browser is
// its): {"module": "browser_watch.mjs", "args": [LEARNER_URL,
// CONSOLE_URL_WITH_TOKEN, SANDBOX]}.
import { screen, waitScreen as waitOn } from './lib/xterm_screen.mjs';

export default async function (context, learnerUrl, consoleUrl, sandbox) {
  const result = { steps: [], violations: [], requests: [] };
  const waitScreen = (page, re, what, ms) => waitOn(page, re, what, result.steps, ms);

  let learner = null, watch = null;
  try {
    learner = await context.newPage();
    await learner.setViewportSize({ width: 900, height: 500 });
    await learner.goto(learnerUrl);
    await waitScreen(learner, /sandbox@\S*:\/workspace\$ $/m, 'learner prompt');
    await learner.locator('.xterm-helper-textarea').focus();
    await learner.keyboard.type('/bin/echo before-$((6*7))\n');
    await waitScreen(learner, /^before-42$/m, 'learner output');

    watch = await context.newPage();
    await watch.setViewportSize({ width: 900, height: 500 });
    watch.on('console', (m) => { if (/Content.Security.Policy|Trusted/i.test(m.text())) result.violations.push(m.text()); });
    watch.on('pageerror', (e) => result.violations.push(String(e)));
    watch.on('request', (r) => result.requests.push(r.url().replace(/token=[^&#]*/, 'token=…')));
    await watch.goto(consoleUrl);
    const link = watch.locator('#sessions .rows > .row', { hasText: sandbox }).locator('a.watch');
    await link.waitFor({ state: 'visible', timeout: 30000 });
    const [resp] = await Promise.all([watch.waitForResponse((r) => /\/watch\.html/.test(r.url())), link.click()]);
    result.steps.push('watch link');
    result.watch_csp = resp.headers()['content-security-policy'] || '';
    await waitScreen(watch, /^before-42$/m, 'watch replay');
    result.url_after = await watch.evaluate(() => location.href);
    await learner.waitForFunction(() => /watched by 1/.test(document.getElementById('watched').textContent) &&
                                        !document.getElementById('watched').hidden, null, { timeout: 30000 });
    result.steps.push('learner told');
    result.watched = await learner.locator('#watched').textContent();
    await learner.keyboard.type('/bin/echo live-$((50+5))\n');
    await waitScreen(watch, /^live-55$/m, 'watch live');
    // Keys typed into the watch page go nowhere: the terminal takes no input.
    await watch.locator('.xterm-helper-textarea').focus().catch(() => {});
    await watch.keyboard.type('echo typed-by-$((1+1))-teacher\n');
    await learner.keyboard.type('/bin/echo after-$((60+6))\n');
    await waitScreen(watch, /^after-66$/m, 'watch after');
    result.teacher_typed = /typed-by-2-teacher/.test(await screen(learner)) || /typed-by-2-teacher/.test(await screen(watch));
    result.status = await watch.locator('#status').textContent();
    await learner.keyboard.type('exit 0\n');
    await watch.waitForFunction(() => /terminal ended \(exit 0\)/.test(document.getElementById('status').textContent),
                                null, { timeout: 30000 });
    result.steps.push('watch closed');
    result.ok = true;
  } catch (e) {
    result.ok = false;
    result.error = String(e && e.message || e);
    for (const [k, p] of [['learner_status', learner], ['watch_status', watch]])
      if (p) result[k] = await p.locator('#status').textContent().catch(() => '?');
    if (result.learner_status !== undefined) result.error += ` (learner: ${result.learner_status}; watch: ${result.watch_status})`;
  }
  return result;
}
