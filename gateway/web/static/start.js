// citegate desktop view: starts the page once every script has run. DOMContentLoaded fires after all
// deferred scripts, so feature files listed after this one still register their hooks before the
// first frame arrives.
//
// When the server rendered the chat the address names into the page (/?s=<id>: its newest page,
// with the session.history frame it comes from in #first-page), the scripts take those articles
// over as if the frame had just arrived: every hook runs (actions, sources, "load earlier"), nothing
// is rendered twice, and session.open on connecting only checks that nothing was added since.
'use strict';

document.addEventListener('DOMContentLoaded', () => {
  const cg = window.citegate;
  const { T, els, state, el } = cg;
  state.current = cg.sessionFromHash();
  els.shareBtn.disabled = !state.current;
  const first = firstPage(state.current, els.messages);
  if (state.current && !first) els.messages.replaceChildren(el('p', 'empty', T.connecting));
  cg.emit('start');
  if (first) {
    const ms = first.messages || [];
    state.prerendered = { sessionId: first.sessionId, newest: ms.length ? ms[ms.length - 1].id : 0 };
    first.prerendered = true;
    cg.emit('frame:session.history', first);
  }
  cg.connect();
});

// firstPage returns the server-rendered page's frame when it is the current chat's and the
// articles are the frame's messages, in order; null otherwise (the page then loads as before).
function firstPage(current, box) {
  const node = document.getElementById('first-page');
  if (!node) return null;
  node.remove();
  let f = null;
  try { f = JSON.parse(node.textContent); } catch (_) { return null; }
  if (!f || f.type !== 'session.history' || !current || f.sessionId !== current) return null;
  const arts = box.querySelectorAll(':scope > .msg[data-id]');
  const ms = f.messages || [];
  if (arts.length !== ms.length || !ms.every((m, i) => arts[i].dataset.id === String(m.id))) return null;
  return f;
}
