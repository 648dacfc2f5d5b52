// citegate desktop view: "load earlier". session.open answers with the newest page of a chat and
// hasMore; this file puts a button above the oldest message shown, asks for the page before it
// (session.more) when the button is pressed or the reader scrolls to the top, and inserts that
// page above without moving what the reader is looking at.
'use strict';

(() => {
  const cg = window.citegate;
  const { els, state, el, send } = cg;
  cg.addTexts({ zh: { loadEarlier: '加载更早的消息', loadingEarlier: '正在加载…' }, en: { loadEarlier: 'Load earlier messages', loadingEarlier: 'Loading…' } });
  const T = cg.T;

  let pending = null; // {sessionId, before} while a session.more is unanswered

  function oldestShown() {
    const first = els.messages.querySelector('.msg[data-id]');
    return first ? Number(first.dataset.id) : 0;
  }
  function removeButton() {
    const old = els.messages.querySelector('.load-earlier');
    if (old) old.remove();
  }
  function addButton(sessionId) {
    removeButton();
    const btn = el('button', 'load-earlier', T.loadEarlier);
    btn.type = 'button';
    btn.addEventListener('click', () => requestMore(sessionId, btn));
    els.messages.prepend(btn);
  }
  function requestMore(sessionId, btn) {
    const before = oldestShown();
    if (pending || sessionId !== state.current || !before) return;
    pending = { sessionId, before };
    if (btn) { btn.disabled = true; btn.textContent = T.loadingEarlier; }
    send({ type: 'session.more', sessionId, before });
  }

  cg.on('frame:session.history', (f) => {
    if (f.sessionId !== state.current) return;
    if (!f.before) {
      // The newest page was just rendered (render.js); an earlier request is void.
      pending = null;
      if (f.hasMore) addButton(f.sessionId);
      return;
    }
    if (!pending || pending.sessionId !== f.sessionId || pending.before !== f.before || oldestShown() !== f.before) return;
    pending = null;
    const box = els.messages;
    const fromBottom = box.scrollHeight - box.scrollTop;
    const list = (f.messages || []).map((m) => {
      const art = cg.messageEl(m.role, m.id);
      art.querySelector('.bubble').innerHTML = m.html; // sanitised on the server
      if (m.interrupted) cg.addStatus(art, 'interrupted', T.interrupted);
      return art;
    });
    removeButton();
    box.prepend(...list);
    if (f.hasMore) addButton(f.sessionId);
    (f.messages || []).forEach((msg, i) => cg.emit('message-rendered', list[i], msg));
    // Keep the message the reader was looking at where it was.
    box.scrollTop = box.scrollHeight - fromBottom;
  });
  // A refused request (the chat was deleted, the connection dropped) lets the button work again.
  cg.on('frame:error', (f) => {
    if (pending && f.sessionId === pending.sessionId) {
      pending = null;
      if (f.sessionId === state.current && els.messages.querySelector('.load-earlier')) addButton(f.sessionId);
    }
  });
  cg.on('disconnected', () => { pending = null; });
  // Scrolling to the top loads the next page by itself.
  els.messages.addEventListener('scroll', () => {
    if (els.messages.scrollTop < 40) {
      const btn = els.messages.querySelector('.load-earlier');
      if (btn && !btn.disabled) requestMore(state.current, btn);
    }
  }, { passive: true });
})();
