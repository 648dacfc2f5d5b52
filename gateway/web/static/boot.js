// citegate desktop view: the first script, loaded async so it runs while the page is still being
// parsed and the other scripts load. It opens the websocket at once and, for a chat named in the
// address (#s=<id>), asks for its newest page as soon as the socket is open, so the server's answer
// is (usually) already here when the other scripts have run. Frames that arrive before core.js
// takes the socket over (citegate.connect) are kept in order and handed to it; nothing else
// happens here. When this script fails or the socket closes first, core.js connects as before.
'use strict';

(() => {
  const m = /^#s=(.+)$/.exec(location.hash);
  let sessionId = null;
  try { sessionId = m ? decodeURIComponent(m[1]) : null; } catch (_) { /* a malformed hash opens no chat */ }
  let ws;
  try {
    ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
  } catch (_) {
    return;
  }
  const early = { ws, frames: [], opened: null };
  ws.onopen = () => {
    if (!sessionId) return;
    ws.send(JSON.stringify({ type: 'session.open', sessionId }));
    early.opened = sessionId;
  };
  ws.onmessage = (e) => { early.frames.push(e.data); };
  window.citegateBoot = early;
})();
