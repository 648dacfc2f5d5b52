// citegate desktop view: message articles, a session's history and the live run (tool lines,
// streamed text, the final sanitised HTML). Emits 'message-rendered' (article, message) whenever a
// message's server-rendered HTML has been placed, so feature files can decorate it.
'use strict';

(() => {
  const cg = window.citegate;
  const { T, els, state, el, send } = cg;

  function nearBottom() {
    const m = els.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }
  // scrollDown follows the conversation when the reader was at its end before the change (stick),
  // and leaves the position alone when they scrolled up to read.
  function scrollDown(stick) {
    if (stick) els.messages.scrollTop = els.messages.scrollHeight;
  }

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
  // renderHistory shows a session's newest page. prerendered: the page already holds these
  // messages' articles (the server rendered them into the shell; start.js checked they match), so
  // they are taken as they are instead of being built again.
  function renderHistory(sessionId, messages, prerendered) {
    if (sessionId !== state.current) return;
    let list;
    if (prerendered) {
      list = Array.from(els.messages.querySelectorAll(':scope > .msg[data-id]'));
      messages.forEach((m, i) => { if (m.interrupted) addStatus(list[i], 'interrupted', T.interrupted); });
    } else {
      list = messages.map((m) => {
        const art = messageEl(m.role, m.id);
        art.querySelector('.bubble').innerHTML = m.html; // sanitised on the server
        if (m.interrupted) addStatus(art, 'interrupted', T.interrupted);
        return art;
      });
      els.messages.replaceChildren(...list);
    }
    const run = state.runs.get(sessionId);
    // A run in progress continues below its history, unless the history already holds its answer.
    const stored = run && run.el.dataset.id && messages.some((m) => String(m.id) === run.el.dataset.id);
    if (run && !run.done && !stored) els.messages.append(run.el);
    messages.forEach((m, i) => cg.emit('message-rendered', list[i], m));
    // The first history on screen is the page's "interactive" point (browser perf test).
    if (!performance.getEntriesByName('citegate:history').length) performance.mark('citegate:history');
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
    // text collects answer.delta for bookkeeping only: what the reader sees is answer.html, the
    // server's sanitised rendering of the answer so far, so raw markdown never shows.
    const run = { runId: f.runId, el: art, body, activity, text: document.createTextNode(''), tools: new Map(), done: false };
    state.runs.set(f.sessionId, run);
    if (f.sessionId === state.current) {
      for (const p of els.messages.querySelectorAll('.msg.pending')) p.classList.remove('pending');
      els.messages.append(art);
      scrollDown(true);
    }
    cg.updateComposer();
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
    if (run && f.text) run.text.appendData(f.text);
  }
  // onPartial shows the answer so far. Frames of a run whose final answer is placed (run.body
  // null) are ignored; the server never sends one after answer.final anyway.
  function onPartial(f) {
    const run = runFor(f);
    if (!run || !run.body || typeof f.html !== 'string') return;
    const stick = nearBottom();
    run.body.innerHTML = f.html; // sanitised on the server (markdown.RenderAnswer of the safe text)
    const thinking = run.activity.querySelector('.tool:not([data-call])');
    if (thinking) thinking.remove();
    scrollDown(stick);
  }
  function onHTML(f) {
    const run = runFor(f);
    // A history page that already holds this answer can arrive before the run's final frame (the
    // page is not held back with the run's joined deltas): the page's article is the answer, and
    // the live one, appended below the page without an id yet, would be a second copy.
    if (run && f.messageId) {
      const stored = els.messages.querySelector('.msg[data-id="' + f.messageId + '"]');
      if (stored && stored !== run.el) {
        run.el.remove();
        run.el = stored;
        run.activity = stored.querySelector('.activity') || el('div', 'activity');
      }
    }
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
    cg.emit('message-rendered', art, { id: f.messageId, role: 'ASSISTANT', html: f.html, content: f.content, citations: f.citations });
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
      if (run.body && !run.body.childElementCount) run.body.remove();
      const bubble = run.el.querySelector('.bubble');
      if (bubble && !bubble.childElementCount && !bubble.textContent.trim()) bubble.remove(); // nothing was said
    } else if (f.sessionId === state.current) {
      send({ type: 'session.open', sessionId: f.sessionId }); // we missed the run: show what was stored
    }
    cg.updateComposer();
    cg.loadSessions();
  }

  // A code block wider than the bubble scrolls sideways; keyboard users need to be able to focus it
  // to scroll it (the sanitiser, rightly, lets no tabindex through from markdown).
  cg.on('message-rendered', (art) => {
    for (const pre of art.querySelectorAll('.bubble pre')) pre.tabIndex = 0;
  });

  // A page with before is an earlier page for history-more.js to insert, not the chat's newest page.
  cg.on('frame:session.history', (f) => { if (!f.before) renderHistory(f.sessionId, f.messages || [], !!f.prerendered); });
  cg.on('frame:run.started', (f) => {
    const mine = f.sessionId === state.current && !!els.messages.querySelector('.msg.pending');
    startRun(f);
    // Another tab (or a channel) started this run: fetch the stored user message too.
    if (f.sessionId === state.current && !mine) send({ type: 'session.open', sessionId: f.sessionId });
  });
  cg.on('frame:tool.started', (f) => onTool(f, false));
  cg.on('frame:tool.finished', (f) => onTool(f, true));
  cg.on('frame:answer.delta', onDelta);
  cg.on('frame:answer.html', onPartial);
  cg.on('frame:answer.final', onHTML);
  cg.on('frame:citations', onHTML);
  cg.on('frame:run.finished', onFinished);

  Object.assign(cg, { messageEl, addStatus, appendUser, nearBottom, scrollDown });
})();
