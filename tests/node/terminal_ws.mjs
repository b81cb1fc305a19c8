// WebSocket conversations with `sandglass serve` for the refusal tests:
//   node terminal_ws.mjs PORT SCRIPT_JSON
// SCRIPT_JSON: {"path": "/v1/terminal", "protocol": "sandglass-terminal" (null: none),
//   "send": [{"text": "..."} | {"binary": "..."} | {"wait_ms": N}], "timeout_ms": N}
// Prints {"opened", "texts": [...], "output": "...", "close_code", "close_reason",
// "error"} once the server closes (or the timeout passes: "timed_out": true).
// SCRIPT_JSON may also be {"all": [SCRIPT, ...], "jobs": N}: the
// conversations run side by side, N at a time (default 4), each on a
// connection of its own; one line is printed, the array of their results
// in the scripts' order.
import WebSocket from 'ws';

const [port, scriptJson] = process.argv.slice(2);

function talk(script) {
  return new Promise((resolve) => {
    const res = { opened: false, texts: [], output: '' };
    let ended = false, timer = null;
    const done = () => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      resolve(JSON.parse(JSON.stringify(res))); // as it was at its end: later events change nothing
    };
    let ws;
    try {
      // null asks for no subprotocol at all (an empty string is the client's
      // own error: the request would never reach the server)
      ws = new WebSocket(`ws://127.0.0.1:${port}${script.path || '/v1/terminal'}`,
                         script.protocol === undefined ? 'sandglass-terminal'
                           : script.protocol === null ? [] : script.protocol);
    } catch (e) { res.error = String(e.message || e); done(); return; }
    ws.on('open', async () => {
      res.opened = true;
      for (const step of script.send || []) {
        if (step.wait_ms) await new Promise((r) => setTimeout(r, step.wait_ms));
        else if ('text' in step) ws.send(step.text);
        else if ('binary' in step) ws.send(Buffer.from(step.binary));
      }
    });
    ws.on('message', (d, bin) => { if (bin) res.output += d.toString(); else res.texts.push(d.toString()); });
    ws.on('unexpected-response', (req, r) => { res.http_status = r.statusCode; done(); req.destroy(); });
    ws.on('error', (e) => { res.error = String(e.message || e); });
    ws.on('close', (code, reason) => { res.close_code = code; res.close_reason = reason.toString(); done(); });
    timer = setTimeout(() => { res.timed_out = true; done(); ws.terminate(); }, script.timeout_ms || 20000);
  });
}

const script = JSON.parse(scriptJson);
if (Array.isArray(script.all)) {
  const out = new Array(script.all.length);
  let next = 0;
  const worker = async () => {
    while (next < script.all.length) {
      const i = next++;
      out[i] = await talk(script.all[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, script.jobs || 4) }, worker));
  console.log(JSON.stringify(out));
} else {
  console.log(JSON.stringify(await talk(script)));
}
process.exit(0);
