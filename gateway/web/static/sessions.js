// citegate desktop view: the chat list, opening a chat, the chat in the address (?s=<id>, which the
// server renders into the page on a reload; #s=<id> links, the older form, still open a chat).
'use strict';

(() => {
  const cg = window.citegate;
  const { T, els, state, el, send } = cg;

  const emptyHint = els.messages.dataset.empty || (els.messages.querySelector('.empty') || {}).textContent || '';
  const chatURL = (id) => '?s=' + encodeURIComponent(id);

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
      a.href = chatURL(s.id);
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
    history.replaceState(null, '', id ? chatURL(id) : location.pathname);
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
      history.replaceState(null, '', chatURL(s.id));
      els.shareBtn.disabled = false;
    }
    renderSessions();
  });
  cg.on('connected', () => {
    // boot.js may have asked for this chat already on this socket (see core.js connect). When the
    // server rendered the chat into the page, only ask whether something was added since (newest:
    // the last message shown; the answer is session.unchanged, or the page as usual).
    const pre = state.prerendered;
    state.prerendered = null;
    if (state.current && state.openSent !== state.current) {
      const f = { type: 'session.open', sessionId: state.current };
      if (pre && pre.sessionId === state.current && pre.newest) f.newest = pre.newest;
      send(f);
    }
    loadSessions();
  });

  // sessionFromHash is the chat the address names: a #s=<id> link first (pasted onto an open
  // page it changes only the hash), else ?s=<id>.
  function sessionFromHash() {
    const m = /^#s=(.+)$/.exec(location.hash);
    if (m) return decodeURIComponent(m[1]);
    return new URLSearchParams(location.search).get('s') || null;
  }
  // Back/forward and pasted links move between sessions without a reload.
  window.addEventListener('hashchange', () => {
    const id = sessionFromHash();
    if (id !== state.current && (id || !location.hash)) openSession(id);
  });

  Object.assign(cg, { loadSessions, renderSessions, openSession, sessionFromHash, chatURL });
})();
