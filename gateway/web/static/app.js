// citegate desktop view. Dependency-free; no build step. Server-rendered HTML (already sanitised by
// citations/markdown) is the only thing put into innerHTML; every other string goes in as text.
'use strict';

(() => {
  const L = {
    zh: {
      newChat: '新对话', connecting: '连接中…', online: '已连接', offline: '连接断开，正在重连…',
      searching: '正在搜索…', reading: '正在阅读网页…', tool: '正在调用工具…', thinking: '正在思考…',
      searched: '已搜索', read: '已阅读网页', toolDone: '工具已完成', toolFailed: '工具调用失败',
      failed: '回答失败', cancelled: '已停止', interrupted: '回答被中断', retry: '请重试。',
      shareFailed: '创建分享失败', copied: '已复制分享链接', revoked: '分享已撤销',
      excerptLoading: '正在加载摘录…', excerptFailed: '无法加载摘录', retrieved: '检索于',
      recheck: '与当前网页比对', changed: '网页内容已变化', unchanged: '网页内容未变化', unreachable: '网页无法访问',
      checked: '比对于', similarity: '摘录仍在网页上的比例',
      truncated: '（摘录已截断）', rejected: '未发送', user: '用户', assistant: '助手',
    },
    en: {
      newChat: 'New chat', connecting: 'Connecting…', online: 'Connected', offline: 'Disconnected, reconnecting…',
      searching: 'Searching…', reading: 'Reading page…', tool: 'Calling a tool…', thinking: 'Thinking…',
      searched: 'Searched', read: 'Read page', toolDone: 'Tool finished', toolFailed: 'Tool failed',
      failed: 'The answer failed', cancelled: 'Stopped', interrupted: 'The answer was interrupted', retry: 'Please try again.',
      shareFailed: 'Could not create the share', copied: 'Share link copied', revoked: 'Share revoked',
      excerptLoading: 'Loading excerpt…', excerptFailed: 'Could not load the excerpt', retrieved: 'Retrieved',
      recheck: 'Compare with the live page', changed: 'The page has changed', unchanged: 'The page is unchanged', unreachable: 'The page cannot be reached',
      checked: 'checked', similarity: 'share of the excerpt still on the page',
      truncated: '(excerpt truncated)', rejected: 'Not sent', user: 'User', assistant: 'Assistant',
    },
  };
  const pageLang = document.documentElement.dataset.lang || (navigator.language || '').toLowerCase();
  const lang = pageLang.startsWith('en') ? 'en' : 'zh';
  const T = L[lang];

  const $ = (id) => document.getElementById(id);
  const els = {
    sessions: $('sessions'), messages: $('messages'), title: $('chat-title'), conn: $('conn'),
    form: $('composer'), input: $('input'), send: $('send'), cancel: $('cancel'), newChat: $('new-chat'),
    shareBtn: $('share-btn'), shareBox: $('share-box'), shareURL: $('share-url'), shareCopy: $('share-copy'),
    shareRevoke: $('share-revoke'), shareClose: $('share-close'), excerpt: $('excerpt'),
    excerptTitle: $('excerpt-title'), excerptMeta: $('excerpt-meta'), excerptText: $('excerpt-text'),
    excerptClose: $('excerpt-close'), toast: $('toast'),
  };

  const emptyHint = (els.messages.querySelector('.empty') || {}).textContent || '';
  const state = {
    ws: null, backoff: 500, sessions: [], current: null, // current session id, null = new chat
    pending: new Map(), // clientMsgId → user bubble element waiting for its session
    runs: new Map(), // sessionId → live run {runId, el, body, text, activity, tools}
    shareToken: null,
  };

  // ---------- small helpers ----------
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function toast(msg) {
    els.toast.textContent = msg;
    els.toast.hidden = false;
    clearTimeout(toast.t);
    toast.t = setTimeout(() => { els.toast.hidden = true; }, 3500);
  }
  function randomId() {
    const a = new Uint8Array(8);
    crypto.getRandomValues(a);
    return Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
  }
  async function api(method, path) {
    const res = await fetch(path, { method, credentials: 'same-origin', headers: { Accept: 'application/json' } });
    if (res.status === 401) { location.reload(); throw new Error('unauthorized'); }
    if (res.status === 204) return null;
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok) throw new Error((body && body.error && body.error.message) || res.statusText);
    return body;
  }
  function nearBottom() {
    const m = els.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }
  // scrollDown follows the conversation when the reader was at its end before the change (stick),
  // and leaves the position alone when they scrolled up to read.
  function scrollDown(stick) {
    if (stick) els.messages.scrollTop = els.messages.scrollHeight;
  }

  // ---------- sessions sidebar ----------
  async function loadSessions() {
    try {
      const body = await api('GET', '/api/sessions');
      state.sessions = body.sessions || [];
      renderSessions();
    } catch (err) { toast(err.message); }
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
    hideShare();
    els.shareBtn.disabled = !id;
    renderSessions();
    if (!id) { showEmpty(); updateComposer(); return; }
    els.messages.replaceChildren(el('p', 'empty', T.connecting));
    send({ type: 'session.open', sessionId: id });
    updateComposer();
  }
  function showEmpty() {
    els.messages.replaceChildren(el('p', 'empty', emptyHint));
  }
  els.newChat.addEventListener('click', () => { openSession(null); els.input.focus(); });

  // ---------- messages ----------
  function messageEl(role, id) {
    const art = el('article', 'msg ' + (role === 'USER' ? 'user' : 'assistant'));
    if (id) { art.dataset.id = id; art.id = 'msg-' + id; }
    art.append(el('div', 'role', role === 'USER' ? T.user : T.assistant));
    const bubble = el('div', 'bubble');
    art.append(bubble);
    return art;
  }
  function addStatus(art, cls, text) {
    const old = art.querySelector('.status');
    if (old) old.remove();
    art.append(el('div', 'status ' + cls, text));
  }
  function renderHistory(sessionId, messages) {
    if (sessionId !== state.current) return;
    const list = messages.map((m) => {
      const art = messageEl(m.role, m.id);
      art.querySelector('.bubble').innerHTML = m.html; // sanitised on the server
      if (m.interrupted) addStatus(art, 'interrupted', T.interrupted);
      return art;
    });
    els.messages.replaceChildren(...list);
    const run = state.runs.get(sessionId);
    // A run in progress continues below its history, unless the history already holds its answer.
    const stored = run && run.el.dataset.id && messages.some((m) => String(m.id) === run.el.dataset.id);
    if (run && !run.done && !stored) els.messages.append(run.el);
    scrollDown(true);
  }
  function appendUser(text) {
    if (els.messages.querySelector('.empty')) els.messages.replaceChildren();
    const art = messageEl('USER');
    art.classList.add('pending');
    art.querySelector('.bubble').append(el('p', 'plain pre', text));
    els.messages.append(art);
    scrollDown(true);
    return art;
  }

  // ---------- live runs ----------
  function startRun(f) {
    const art = messageEl('ASSISTANT');
    const activity = el('div', 'activity');
    const body = el('div', 'streaming');
    activity.append(el('div', 'tool', T.thinking));
    art.querySelector('.bubble').append(activity, body);
    const run = { runId: f.runId, el: art, body, activity, text: document.createTextNode(''), tools: new Map(), done: false };
    body.append(run.text);
    state.runs.set(f.sessionId, run);
    if (f.sessionId === state.current) {
      for (const p of els.messages.querySelectorAll('.msg.pending')) p.classList.remove('pending');
      els.messages.append(art);
      scrollDown(true);
    }
    updateComposer();
    return run;
  }
  function runFor(f) {
    const run = state.runs.get(f.sessionId);
    if (run && (!f.runId || run.runId === f.runId)) return run;
    // A run that started before this page connected: follow it from here on.
    if (!run && f.sessionId === state.current && f.type !== 'run.finished') return startRun(f);
    return null;
  }
  function toolLabel(f) {
    let arg = '';
    try {
      const a = JSON.parse(f.arguments || '{}');
      arg = a.query || a.url || '';
    } catch (_) { /* arguments are shown only when they parse */ }
    const label = f.tool === 'web_search' ? T.searching : f.tool === 'open_web_page' ? T.reading : T.tool;
    return [label, String(arg).slice(0, 120)];
  }
  function onTool(f, finished) {
    const run = runFor(f);
    if (!run) return;
    const stick = nearBottom();
    const thinking = run.activity.querySelector('.tool:not([data-call])');
    if (thinking) thinking.remove();
    let line = run.tools.get(f.callId);
    if (!line) {
      const [label, arg] = toolLabel(f);
      line = el('div', 'tool', label);
      line.dataset.call = f.callId || '';
      if (arg) line.append(el('span', 'arg', arg));
      run.activity.append(line);
      run.tools.set(f.callId, line);
    }
    if (finished) {
      line.classList.add(f.ok ? 'ok' : 'fail');
      const done = !f.ok ? T.toolFailed : f.tool === 'web_search' ? T.searched : f.tool === 'open_web_page' ? T.read : T.toolDone;
      line.firstChild.data = done;
    }
    scrollDown(stick);
  }
  function onDelta(f) {
    const run = runFor(f);
    if (!run || !f.text) return;
    const stick = nearBottom();
    run.text.appendData(f.text); // text only, never markup
    scrollDown(stick);
  }
  function onHTML(f) {
    const run = runFor(f);
    let art = run ? run.el : null;
    if (!art && f.messageId) art = els.messages.querySelector('.msg[data-id="' + f.messageId + '"]');
    if (!art || typeof f.html !== 'string') return;
    if (f.messageId) { art.dataset.id = f.messageId; art.id = 'msg-' + f.messageId; }
    const bubble = art.querySelector('.bubble');
    const activity = run ? run.activity : bubble.querySelector('.activity');
    const stick = nearBottom();
    bubble.innerHTML = f.html; // sanitised on the server (markdown.Render)
    if (activity && activity.childElementCount) bubble.prepend(activity);
    if (run) run.body = null;
    scrollDown(stick);
  }
  function onFinished(f) {
    const run = runFor(f);
    if (run) {
      run.done = true;
      state.runs.delete(f.sessionId);
      if (run.body) run.body.classList.remove('streaming');
      if (f.phase === 'FAILED') {
        addStatus(run.el, 'failed', T.failed + (f.error ? ': ' + f.error : '') + ' ' + T.retry);
      } else if (f.phase === 'CANCELLED') {
        addStatus(run.el, 'cancelled', T.cancelled);
      }
      const thinking = run.activity.querySelector('.tool:not([data-call])');
      if (thinking) thinking.remove();
      if (!run.activity.childElementCount) run.activity.remove();
      if (run.body && !run.text.data) run.body.remove();
      const bubble = run.el.querySelector('.bubble');
      if (bubble && !bubble.childElementCount && !bubble.textContent.trim()) bubble.remove(); // nothing was said
    } else if (f.sessionId === state.current) {
      send({ type: 'session.open', sessionId: f.sessionId }); // we missed the run: show what was stored
    }
    updateComposer();
    loadSessions();
  }

  // ---------- websocket ----------
  function connect() {
    setConn(T.connecting, false);
    const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
    state.ws = ws;
    ws.onopen = () => {
      state.backoff = 500;
      setConn(T.online, false);
      if (state.current) send({ type: 'session.open', sessionId: state.current });
      loadSessions();
    };
    ws.onmessage = (e) => {
      let f;
      try { f = JSON.parse(e.data); } catch (_) { return; }
      try { handle(f); } catch (err) { console.error('frame', f && f.type, err); }
    };
    ws.onclose = (e) => {
      if (state.ws !== ws) return;
      state.ws = null;
      setConn(T.offline, true);
      // Runs keep going on the server; after reconnecting, session.open shows what was stored.
      for (const [sid, run] of state.runs) { run.done = true; state.runs.delete(sid); }
      updateComposer();
      if (e.code === 1008 || e.code === 4401) { location.reload(); return; }
      // A refused upgrade looks like any network failure; ask the API, which reloads to the login
      // page when the session cookie is no longer valid.
      api('GET', '/api/me').catch(() => {});
      const wait = state.backoff + Math.random() * state.backoff;
      state.backoff = Math.min(state.backoff * 2, 15000);
      setTimeout(connect, wait);
    };
  }
  function setConn(text, down) {
    els.conn.textContent = text;
    els.conn.classList.toggle('down', down);
  }
  function send(frame) {
    if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return false;
    state.ws.send(JSON.stringify(frame));
    return true;
  }
  function handle(f) {
    switch (f.type) {
      case 'session.created': {
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
        break;
      }
      case 'session.history': renderHistory(f.sessionId, f.messages || []); break;
      case 'run.started': {
        const mine = f.sessionId === state.current && !!els.messages.querySelector('.msg.pending');
        startRun(f);
        // Another tab (or a channel) started this run: fetch the stored user message too.
        if (f.sessionId === state.current && !mine) send({ type: 'session.open', sessionId: f.sessionId });
        break;
      }
      case 'tool.started': onTool(f, false); break;
      case 'tool.finished': onTool(f, true); break;
      case 'answer.delta': onDelta(f); break;
      case 'answer.final':
      case 'citations': onHTML(f); break;
      case 'run.finished': onFinished(f); break;
      case 'error': onError(f); break;
      default: break;
    }
  }
  function onError(f) {
    const pending = f.clientMsgId && state.pending.get(f.clientMsgId);
    if (pending) {
      state.pending.delete(f.clientMsgId);
      pending.classList.remove('pending');
      pending.classList.add('rejected');
      addStatus(pending, 'failed', T.rejected + ': ' + (f.message || f.code));
    } else if (f.code === 'not_found' && f.sessionId && f.sessionId === state.current) {
      openSession(null);
    }
    toast(f.message || f.code || 'error');
    updateComposer();
  }

  // ---------- composer ----------
  function updateComposer() {
    const running = !!(state.current && state.runs.has(state.current));
    els.cancel.hidden = !running;
    els.send.disabled = running;
  }
  els.form.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = els.input.value.trim();
    if (!text || els.send.disabled) return;
    const clientMsgId = randomId();
    const frame = { type: 'chat.send', text, clientMsgId };
    if (state.current) frame.sessionId = state.current;
    if (!send(frame)) { toast(T.offline); return; }
    const art = appendUser(text);
    state.pending.set(clientMsgId, art);
    // For an existing session the bubble is confirmed by run.started; keep only new-session ones.
    if (state.current) setTimeout(() => state.pending.delete(clientMsgId), 30000);
    els.input.value = '';
    autosize();
  });
  els.input.addEventListener('keydown', (e) => {
    // isComposing: Enter confirms an IME candidate (Chinese input) and must not send.
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      els.form.requestSubmit();
    }
  });
  function autosize() {
    els.input.style.height = 'auto';
    els.input.style.height = Math.min(els.input.scrollHeight + 2, window.innerHeight * 0.3) + 'px';
  }
  els.input.addEventListener('input', autosize);
  els.cancel.addEventListener('click', () => {
    if (state.current) send({ type: 'chat.cancel', sessionId: state.current });
  });

  // ---------- citations: superscripts and excerpts (event delegation) ----------
  function flash(entry) {
    const details = entry.closest('details');
    if (details && !details.open) details.open = true;
    entry.scrollIntoView({ behavior: 'smooth', block: 'nearest' });
    entry.classList.remove('cite-flash');
    void entry.offsetWidth; // restart the animation when clicked twice
    entry.classList.add('cite-flash');
    clearTimeout(entry._flashTimer);
    entry._flashTimer = setTimeout(() => entry.classList.remove('cite-flash'), 1600);
  }
  document.addEventListener('click', (e) => {
    const ref = e.target.closest('sup.cite-ref a');
    if (ref) {
      const id = decodeURIComponent((ref.getAttribute('href') || '').slice(1));
      const entry = id && document.getElementById(id);
      if (entry) { e.preventDefault(); flash(entry); }
      return;
    }
    const btn = e.target.closest('button.src-preview');
    if (btn) { e.preventDefault(); showExcerpt(btn.dataset.message, btn.dataset.n, false); }
  });

  async function showExcerpt(messageId, n, recheck) {
    if (!messageId || !n) return;
    els.excerpt.hidden = false;
    els.excerptTitle.textContent = '';
    els.excerptMeta.replaceChildren(el('span', '', T.excerptLoading));
    if (!recheck) els.excerptText.textContent = '';
    try {
      const q = recheck ? '?recheck=1' : '';
      const p = await api('GET', '/api/messages/' + encodeURIComponent(messageId) + '/citations/' + encodeURIComponent(n) + '/preview' + q);
      els.excerptTitle.textContent = p.title || p.url;
      els.excerptTitle.title = p.url;
      const link = el('a', '', p.url);
      link.href = /^https?:\/\//i.test(p.url) ? p.url : '#';
      link.target = '_blank';
      link.rel = 'noopener noreferrer';
      const meta = [link];
      if (p.retrievedAt) meta.push(el('span', '', T.retrieved + ' ' + new Date(p.retrievedAt).toLocaleString(lang === 'en' ? 'en' : 'zh-CN')));
      if (p.truncated) meta.push(el('span', '', T.truncated));
      if (p.recheck) {
        // The verdict in the page's language; the server's one-sentence detail as a tooltip.
        const rc = p.recheck;
        let label = T[rc.status] || rc.status;
        if (rc.status === 'changed' && typeof rc.similarity === 'number') label += ' (' + T.similarity + ' ' + Math.round(rc.similarity * 100) + '%)';
        const v = el('span', rc.status === 'unchanged' ? 'unchanged' : 'changed', label);
        v.title = (rc.detail || '') + (rc.checkedAt ? ' — ' + T.checked + ' ' + new Date(rc.checkedAt).toLocaleString(lang === 'en' ? 'en' : 'zh-CN') : '');
        meta.push(v);
      } else if (typeof p.changed === 'boolean') {
        meta.push(el('span', p.changed ? 'changed' : 'unchanged', p.changed ? T.changed : T.unchanged));
      } else {
        const b = el('button', 'link', T.recheck);
        b.type = 'button';
        b.addEventListener('click', () => showExcerpt(messageId, n, true));
        meta.push(b);
      }
      els.excerptMeta.replaceChildren(...meta);
      els.excerptText.textContent = p.excerpt || ''; // the page text the model saw, as text
    } catch (err) {
      els.excerptMeta.replaceChildren(el('span', 'changed', T.excerptFailed + ': ' + err.message));
    }
  }
  els.excerptClose.addEventListener('click', () => { els.excerpt.hidden = true; });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape') els.excerpt.hidden = true; });

  // ---------- sharing ----------
  function hideShare() { els.shareBox.hidden = true; state.shareToken = null; }
  els.shareBtn.addEventListener('click', async () => {
    if (!state.current) return;
    try {
      const s = await api('POST', '/api/sessions/' + encodeURIComponent(state.current) + '/shares');
      state.shareToken = s.token;
      els.shareURL.value = s.url;
      els.shareBox.hidden = false;
      els.shareURL.select();
    } catch (err) { toast(T.shareFailed + ': ' + err.message); }
  });
  els.shareCopy.addEventListener('click', async () => {
    els.shareURL.select();
    try { await navigator.clipboard.writeText(els.shareURL.value); } catch (_) { document.execCommand('copy'); }
    toast(T.copied);
  });
  els.shareRevoke.addEventListener('click', async () => {
    if (!state.shareToken) return;
    try {
      await api('DELETE', '/api/shares/' + encodeURIComponent(state.shareToken));
      hideShare();
      toast(T.revoked);
    } catch (err) { toast(err.message); }
  });
  els.shareClose.addEventListener('click', hideShare);

  // ---------- start ----------
  function sessionFromHash() {
    const m = /^#s=(.+)$/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }
  // Back/forward and pasted links move between sessions without a reload.
  window.addEventListener('hashchange', () => {
    const id = sessionFromHash();
    if (id !== state.current && (id || !location.hash)) openSession(id);
  });
  state.current = sessionFromHash();
  els.shareBtn.disabled = !state.current;
  if (state.current) els.messages.replaceChildren(el('p', 'empty', T.connecting));
  connect();
})();
