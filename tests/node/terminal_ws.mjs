// One WebSocket conversation with `sandglass serve` for the refusal tests:
//   node terminal_ws.mjs PORT SCRIPT_JSON
// SCRIPT_JSON: {"path": "/v1/terminal", "protocol": "sandglass-terminal" (null: none),
//   "send": [{"text": "..."} | {"binary": "..."} | {"wait_ms": N}], "timeout_ms": N}
// Prints {"opened", "texts": [...], "output": "...", "close_code", "close_reason",
// "error"} once the server closes (or the timeout passes: "timed_out": true).
import WebSocket from 'ws';

const [port, scriptJson] = process.argv.slice(2);
const script = JSON.parse(scriptJson);
const res = { opened: false, texts: [], output: '' };
const done = () => { console.log(JSON.stringify(res)); process.exit(0); };
let ws;
try {
  // null asks for no subprotocol at all (an empty string is the client's
  // own error: the request would never reach the server)
  ws = new WebSocket(`ws://127.0.0.1:${port}${script.path || '/v1/terminal'}`,
                     script.protocol === undefined ? 'sandglass-terminal'
                       : script.protocol === null ? [] : script.protocol);
} catch (e) { res.error = String(e.message || e); done(); }
ws.on('open', async () => {
  res.opened = true;
  for (const step of script.send || []) {
    if (step.wait_ms) await new Promise((r) => setTimeout(r, step.wait_ms));
    else if ('text' in step) ws.send(step.text);
    else if ('binary' in step) ws.send(Buffer.from(step.binary));
  }
});
ws.on('message', (d, bin) => { if (bin) res.output += d.toString(); else res.texts.push(d.toString()); });
ws.on('unexpected-response', (req, r) => { res.http_status = r.statusCode; done(); });
ws.on('error', (e) => { res.error = String(e.message || e); });
ws.on('close', (code, reason) => { res.close_code = code; res.close_reason = reason.toString(); done(); });
setTimeout(() => { res.timed_out = true; done(); }, script.timeout_ms || 20000);
