// The learner's terminal: xterm.js on a WebSocket to `sandglass serve`
// (src/wire/termws.h has the protocol: its messages typed, one encoder and
// strict decoder; this page sends AUTH and RESIZE, reads EXIT, ERROR and
// WATCHERS: "watched by N" while a teacher watches, read-only). The terminal token comes in the
// page's fragment (#token=...), which the browser never sends to a server.
(function () {
  "use strict";
  const status = document.getElementById("status");
  const say = (s) => { status.textContent = s; };
  const watched = document.getElementById("watched");
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  // Out of the address bar and the history at once: the fragment never
  // reaches a server, but a URL with the token would stay in the
  // browser's history, its session restore, and a screenshot or a copied link.
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  const term = new Terminal({ cursorBlink: true, scrollback: 5000 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("term"));
  fit.fit();
  window.sandglassTerm = term; // for tests: the screen's text
  if (!token) {
    say("no token: open this page as /#token=TOKEN");
    return;
  }
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host +
                           "/v1/terminal", "sandglass-terminal");
  ws.binaryType = "arraybuffer";
  const enc = new TextEncoder();
  ws.onopen = () => {
    ws.send(JSON.stringify({ token: token, rows: term.rows, cols: term.cols }));
    say("connected");
    term.focus();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== "string") {
      term.write(new Uint8Array(ev.data));
      return;
    }
    const m = JSON.parse(ev.data);
    if ("watchers" in m) {
      const n = Number(m.watchers) | 0;
      watched.textContent = "watched by " + n;
      watched.hidden = n === 0;
    } else if ("exit" in m) say("the shell ended (" + m.exit + ")");
    else if ("error" in m) { say(m.error); term.write("\r\n\x1b[31m" + m.error + "\x1b[0m\r\n"); }
  };
  ws.onclose = (ev) => { if (status.textContent === "connected") say("closed" + (ev.reason ? ": " + ev.reason : "")); };
  term.onData((d) => { if (ws.readyState === 1) ws.send(enc.encode(d)); });
  term.onBinary((d) => {
    if (ws.readyState !== 1) return;
    const b = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 255;
    ws.send(b);
  });
  term.onResize((s) => {
    if (ws.readyState === 1) ws.send(JSON.stringify({ resize: { rows: s.rows, cols: s.cols } }));
  });
  window.addEventListener("resize", () => fit.fit());
})();
