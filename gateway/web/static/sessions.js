// citegate desktop view: the chat list, opening a chat, the address-bar hash (#s=<id>).
'use strict';

(() => {
  const cg = window.citegate;
  const { T, els, state, el, send } = cg;

  const emptyHint = (els.messages.querySelector('.empty') || {}).textContent || '';

  async function loadSessions() {
    try {
      const body = await cg.api('GET', '/api/sessions');
      state.sessions = body.sessions || [];
      renderSessions();
    } catch (err) { cg.toast(err.message); }
  }
  function renderSessions() {
    els.sessions.replaceChildren(...state.sessions.map((s) => {
      const li = el('li');
      const a = el('a', s.id === state.current ? 'active' : '', s.title || T.newChat);
      a.href = '#s=' + encodeURIComponent(s.id);
      a.dataset.id = s.id;
      a.title = s.title || '';
      if (s.channel && s.channel !== 'desktop') a.append(el('span', 'channel', s.channel));
      li.append(a);
      return li;
    }));
    const cur = state.sessions.find((s) => s.id === state.current);
    els.title.textContent = cur ? (cur.title || T.newChat) : T.newChat;
    cg.emit('sessions-rendered');
  }
  els.sessions.addEventListener('click', (e) => {
    const a = e.target.closest('a[data-id]');
    if (!a) return;
    e.preventDefault();
    openSession(a.dataset.id);
  });

  function openSession(id) {
    state.current = id;
    history.replaceState(null, '', id ? '#s=' + encodeURIComponent(id) : location.pathname);
    cg.hideShare();
    els.shareBtn.disabled = !id;
    renderSessions();
    cg.emit('session-opened', id);
    if (!id) { showEmpty(); cg.updateComposer(); return; }
    els.messages.replaceChildren(el('p', 'empty', T.connecting));
    send({ type: 'session.open', sessionId: id });
    cg.updateComposer();
  }
  function showEmpty() {
    els.messages.replaceChildren(el('p', 'empty', emptyHint));
  }
  els.newChat.addEventListener('click', () => { openSession(null); els.input.focus(); });

  cg.on('frame:session.created', (f) => {
    const s = f.session || { id: f.sessionId };
    if (!state.sessions.some((x) => x.id === s.id)) state.sessions.unshift(s);
    const pending = f.clientMsgId && state.pending.get(f.clientMsgId);
    if (pending) {
      state.pending.delete(f.clientMsgId);
      state.current = s.id;
      history.replaceState(null, '', '#s=' + encodeURIComponent(s.id));
      els.shareBtn.disabled = false;
    }
    renderSessions();
  });
  cg.on('connected', () => {
    if (state.current) send({ type: 'session.open', sessionId: state.current });
    loadSessions();
  });

  function sessionFromHash() {
    const m = /^#s=(.+)$/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }
  // Back/forward and pasted links move between sessions without a reload.
  window.addEventListener('hashchange', () => {
    const id = sessionFromHash();
    if (id !== state.current && (id || !location.hash)) openSession(id);
  });

  Object.assign(cg, { loadSessions, renderSessions, openSession, sessionFromHash });
})();
