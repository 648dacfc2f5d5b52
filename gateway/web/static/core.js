// citegate desktop view, part 1 of several classic scripts loaded in order by index.html (no build
// step, no framework). core.js owns the shared namespace window.citegate: texts, state, the API and
// websocket helpers, and a tiny hook mechanism the other files (and any later feature file) use:
//
//   citegate.on('frame:<type>', (frame) => …)   every server websocket frame of that type
//   citegate.on('message-rendered', (article, message) => …)   a message's sanitised HTML was placed
//   citegate.on('connecting' | 'connected' | 'disconnected', () => …)
//   citegate.api(method, path[, body]), citegate.send(frame), citegate.T (texts), citegate.el(tag, cls, text)
//
// Server-rendered HTML (already sanitised by citations/markdown) is the only thing put into
// innerHTML; every other string goes in as text.
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
      retryingIn: '连接断开，{n} 秒后重连', retryIn: '发送过于频繁，{n} 秒后可以再发送；你输入的内容已保留。', canSend: '现在可以再发送了。',
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
      retryingIn: 'Disconnected, reconnecting in {n} s', retryIn: 'Too many messages: you can send again in {n} s; your text is kept.', canSend: 'You can send again now.',
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

  const state = {
    ws: null, backoff: 500, sessions: [], current: null, // current session id, null = new chat
    pending: new Map(), // clientMsgId → user bubble element waiting for its session
    runs: new Map(), // sessionId → live run {runId, el, body, text, activity, tools}
    shareToken: null,
    prerendered: null, // {sessionId, newest} while the server-rendered first page awaits its check (start.js)
    openSent: null, // the chat boot.js asked for on the socket being taken over (core.js connect)
  };

  // ---------- hooks ----------
  const hooks = new Map();
  // on registers fn for a named event; handlers run in registration order (file order).
  function on(name, fn) {
    if (!hooks.has(name)) hooks.set(name, []);
    hooks.get(name).push(fn);
  }
  // emit calls every handler; one failing handler is logged and does not stop the others.
  function emit(name, ...args) {
    for (const fn of hooks.get(name) || []) {
      try { fn(...args); } catch (err) { console.error('hook', name, err); }
    }
  }

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
  // api calls the JSON API with the session cookie; body, when given, is sent as JSON.
  async function api(method, path, body) {
    const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    if (res.status === 401) { location.reload(); throw new Error('unauthorized'); }
    if (res.status === 204) return null;
    let out = null;
    try { out = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok) throw new Error((out && out.error && out.error.message) || res.statusText);
    return out;
  }

  // ---------- websocket ----------
  function onFrame(data) {
    let f;
    try { f = JSON.parse(data); } catch (_) { return; }
    if (f && typeof f.type === 'string') emit('frame:' + f.type, f);
  }
  // takeEarly returns the socket boot.js opened while the page loaded (once), or null when there
  // is none or it is already closing.
  function takeEarly() {
    const early = window.citegateBoot;
    window.citegateBoot = null;
    if (!early || !early.ws || early.ws.readyState > WebSocket.OPEN) return null;
    return early;
  }
  function connect() {
    emit('connecting');
    setConn(T.connecting, false);
    const early = takeEarly();
    const ws = early ? early.ws : new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
    state.ws = ws;
    const opened = () => {
      state.backoff = 500;
      setConn(T.online, false);
      // openSent names the chat whose session.open boot.js already sent on this socket, so
      // sessions.js does not ask twice; it holds only while 'connected' runs.
      state.openSent = early && early.opened;
      emit('connected');
      state.openSent = null;
    };
    ws.onopen = opened;
    ws.onmessage = (e) => onFrame(e.data);
    if (early && ws.readyState === WebSocket.OPEN) {
      // Opened before this script ran: report it, then the frames that came meanwhile, in order,
      // before any later frame (those are queued tasks, this runs now).
      opened();
      for (const data of early.frames.splice(0)) onFrame(data);
    }
    ws.onclose = (e) => {
      if (state.ws !== ws) return;
      state.ws = null;
      setConn(T.offline, true);
      // Runs keep going on the server; after reconnecting, session.open shows what was stored.
      for (const [sid, run] of state.runs) { run.done = true; state.runs.delete(sid); }
      emit('disconnected');
      if (e.code === 1008 || e.code === 4401) { location.reload(); return; }
      // A refused upgrade looks like any network failure; ask the API, which reloads to the login
      // page when the session cookie is no longer valid.
      api('GET', '/api/me').catch(() => {});
      const wait = state.backoff + Math.random() * state.backoff;
      state.backoff = Math.min(state.backoff * 2, 15000);
      state.retryAt = Date.now() + wait;
      state.retryTimer = setTimeout(connect, wait);
      emit('reconnect-scheduled', wait);
    };
  }
  // reconnectNow skips the back-off wait: the user asked ("retry now"), the tab got focus again or
  // the network came back. It does nothing while a connection is open or being opened.
  function reconnectNow() {
    if (state.ws) return;
    clearTimeout(state.retryTimer);
    state.backoff = 500;
    connect();
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

  window.citegate = {
    L, lang, T, $, els, state, on, emit, el, toast, randomId, api, connect, reconnectNow, send,
    // addTexts merges a feature file's own strings: addTexts({zh: {...}, en: {...}}).
    addTexts(texts) {
      for (const k of Object.keys(L)) Object.assign(L[k], texts[k] || {});
    },
  };
})();
