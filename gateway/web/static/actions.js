// citegate desktop view: message actions. Under each answer: copy (the text with [1]-style numbers
// and its sources, built by the server from the stored record: GET /api/messages/{id}/text),
// regenerate, and feedback (up/down and an optional comment). Under each question: edit and
// resend. On each code block: copy code.
//
// Regenerate is a new run of the same question (websocket chat.regenerate). The old answer stays:
// every answer to one question is a version of one reply, shown one at a time with "‹ 2/2 ›" to
// switch between them, the newest first. The history records which question a regenerated run
// answers (its USER message carries regenerateOf), so the grouping is the same after a reload.
// Edit and resend (chat.edit) appends the edited question as a new turn; earlier messages stay.
'use strict';

(() => {
  const cg = window.citegate;
  const { els, state, el } = cg;
  cg.addTexts({
    zh: {
      actCopy: '复制', actCopied: '已复制', actCopyFailed: '复制失败', actCopyCode: '复制代码',
      actRegenerate: '重新生成', actEdit: '编辑', actEditSend: '发送', actEditCancel: '取消',
      actEditLabel: '编辑问题', actEdited: '已编辑', actUp: '有帮助', actDown: '没有帮助',
      actComment: '补充说明（可选）', actCommentSave: '保存', actThanks: '感谢反馈',
      actFeedbackFailed: '反馈未保存', actVersions: '回答版本', actPrev: '上一个版本', actNext: '下一个版本',
      actBusy: '请等当前回答结束', actToolbar: '消息操作', actAnswerActions: '回答操作', actQuestionActions: '问题操作',
    },
    en: {
      actCopy: 'Copy', actCopied: 'Copied', actCopyFailed: 'Could not copy', actCopyCode: 'Copy code',
      actRegenerate: 'Regenerate', actEdit: 'Edit', actEditSend: 'Send', actEditCancel: 'Cancel',
      actEditLabel: 'Edit the question', actEdited: 'edited', actUp: 'Helpful', actDown: 'Not helpful',
      actComment: 'Add a comment (optional)', actCommentSave: 'Save', actThanks: 'Thanks for the feedback',
      actFeedbackFailed: 'Feedback not saved', actVersions: 'Answer versions', actPrev: 'Previous version', actNext: 'Next version',
      actBusy: 'Wait for the current answer to finish', actToolbar: 'Message actions', actAnswerActions: 'Answer actions', actQuestionActions: 'Question actions',
    },
  });
  const T = cg.T;

  function button(cls, label, text) {
    const b = el('button', 'act ' + cls, text);
    b.type = 'button';
    if (label && label !== text) { b.setAttribute('aria-label', label); b.title = label; }
    return b;
  }
  // Thumb icons (Feather, MIT) drawn as SVG: an emoji would depend on the reader's fonts.
  const THUMB_UP = 'M14 9V5a3 3 0 0 0-3-3l-4 9v11h11.28a2 2 0 0 0 2-1.7l1.38-9a2 2 0 0 0-2-2.3zM7 22H4a2 2 0 0 1-2-2v-7a2 2 0 0 1 2-2h3';
  const THUMB_DOWN = 'M10 15v4a3 3 0 0 0 3 3l4-9V2H5.72a2 2 0 0 0-2 1.7l-1.38 9a2 2 0 0 0 2 2.3zm7-13h2.67A2.31 2.31 0 0 1 22 4v7a2.31 2.31 0 0 1-2.33 2H17';
  function icon(d) {
    const NS = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('viewBox', '0 0 24 24');
    svg.setAttribute('width', '15');
    svg.setAttribute('height', '15');
    svg.setAttribute('aria-hidden', 'true');
    svg.setAttribute('focusable', 'false');
    const path = document.createElementNS(NS, 'path');
    path.setAttribute('d', d);
    svg.append(path);
    return svg;
  }
  function busy() {
    if (state.current && state.runs.has(state.current)) { cg.toast(T.actBusy); return true; }
    return false;
  }

  // ---------- clipboard ----------
  // copyText puts text (or the text a promise resolves to) on the clipboard. A promise goes through
  // ClipboardItem where the browser has it, so Safari keeps the click's permission while the text
  // is fetched; the textarea fallback serves pages without the async clipboard (plain http).
  async function copyText(textOrPromise) {
    const p = Promise.resolve(textOrPromise);
    if (window.ClipboardItem && navigator.clipboard && navigator.clipboard.write) {
      try {
        await navigator.clipboard.write([new ClipboardItem({ 'text/plain': p.then((t) => new Blob([t], { type: 'text/plain' })) })]);
        return true;
      } catch (_) { /* fall through */ }
    }
    const text = await p;
    if (navigator.clipboard && navigator.clipboard.writeText) {
      try { await navigator.clipboard.writeText(text); return true; } catch (_) { /* fall through */ }
    }
    const ta = el('textarea');
    ta.value = text;
    ta.setAttribute('readonly', '');
    ta.style.position = 'fixed';
    ta.style.opacity = '0';
    document.body.append(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch (_) { ok = false; }
    ta.remove();
    return ok;
  }
  async function flashDone(btn, promise) {
    let ok = false;
    try { ok = await promise; } catch (err) { ok = false; }
    btn.classList.toggle('done', ok);
    cg.toast(ok ? T.actCopied : T.actCopyFailed);
    clearTimeout(btn._t);
    btn._t = setTimeout(() => btn.classList.remove('done'), 1500);
  }

  // ---------- decorating rendered messages ----------
  function decorate(art, m) {
    if (!art || !m || !m.id) return;
    art.dataset.id = m.id;
    // Kept on the article, so versions can be grouped over every page of history on the page.
    if (m.regenerateOf) art.dataset.regenerateOf = m.regenerateOf;
    const old = art.querySelector(':scope > .msg-actions');
    if (old) old.remove();
    if (m.role === 'USER') decorateQuestion(art, m);
    else decorateAnswer(art, m);
  }

  function decorateAnswer(art, m) {
    const bubble = art.querySelector('.bubble');
    if (bubble) {
      for (const pre of bubble.querySelectorAll('pre')) {
        if (pre.parentElement && pre.parentElement.classList.contains('code-wrap')) continue;
        const wrap = el('div', 'code-wrap');
        pre.replaceWith(wrap);
        const b = button('copy-code', T.actCopyCode, T.actCopyCode);
        b.addEventListener('click', () => flashDone(b, copyText((pre.querySelector('code') || pre).textContent)));
        wrap.append(b, pre);
      }
    }
    if (m.feedback !== undefined) art._feedback = m.feedback || null;
    const bar = el('div', 'msg-actions');
    bar.setAttribute('role', 'toolbar');
    bar.setAttribute('aria-label', T.actAnswerActions);
    const copy = button('copy', T.actCopy, T.actCopy);
    copy.addEventListener('click', () => {
      const text = cg.api('GET', '/api/messages/' + encodeURIComponent(m.id) + '/text?lang=' + cg.lang).then((r) => r.text);
      flashDone(copy, copyText(text));
    });
    const regen = button('regenerate', T.actRegenerate, T.actRegenerate);
    regen.addEventListener('click', () => regenerate(m.id));
    const up = button('vote up', T.actUp);
    const down = button('vote down', T.actDown);
    up.append(icon(THUMB_UP));
    down.append(icon(THUMB_DOWN));
    up.dataset.vote = 'up';
    down.dataset.vote = 'down';
    for (const b of [up, down]) b.addEventListener('click', () => vote(art, m.id, b.dataset.vote));
    bar.append(copy, regen, up, down);
    art.append(bar);
    showVote(art);
    const versions = art._versions;
    if (versions) addVersionNav(art, versions);
  }

  function decorateQuestion(art, m) {
    if (m.editOf) {
      const role = art.querySelector('.role');
      if (role && !role.querySelector('.edited')) role.append(' · ', el('span', 'edited', T.actEdited));
    }
    const bar = el('div', 'msg-actions');
    bar.setAttribute('role', 'toolbar');
    bar.setAttribute('aria-label', T.actQuestionActions);
    const edit = button('edit', T.actEdit, T.actEdit);
    edit.addEventListener('click', () => startEdit(art, m));
    bar.append(edit);
    art.append(bar);
  }

  // ---------- feedback ----------
  function showVote(art) {
    const fb = art._feedback || null;
    for (const b of art.querySelectorAll('.msg-actions .vote')) {
      const on = !!fb && fb.vote === b.dataset.vote;
      b.setAttribute('aria-pressed', on ? 'true' : 'false');
      b.classList.toggle('on', on);
    }
  }
  async function vote(art, id, v) {
    const cur = art._feedback || null;
    const path = '/api/messages/' + encodeURIComponent(id) + '/feedback';
    try {
      if (cur && cur.vote === v) {
        await cg.api('DELETE', path);
        art._feedback = null;
        closeComment(art);
      } else {
        const r = await cg.api('PUT', path, { vote: v, comment: (cur && cur.comment) || '' });
        art._feedback = r.feedback;
        openComment(art, id);
      }
      showVote(art);
    } catch (err) { cg.toast(T.actFeedbackFailed + ': ' + err.message); }
  }
  function closeComment(art) {
    const f = art.querySelector(':scope > .feedback-form');
    if (f) f.remove();
  }
  function openComment(art, id) {
    closeComment(art);
    const form = el('form', 'feedback-form');
    const input = el('input');
    input.type = 'text';
    input.maxLength = 1000;
    input.placeholder = T.actComment;
    input.setAttribute('aria-label', T.actComment);
    input.value = (art._feedback && art._feedback.comment) || '';
    const save = el('button', 'act', T.actCommentSave);
    save.type = 'submit';
    form.append(input, save);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const fb = art._feedback;
      if (!fb) return;
      try {
        const r = await cg.api('PUT', '/api/messages/' + encodeURIComponent(id) + '/feedback', { vote: fb.vote, comment: input.value });
        art._feedback = r.feedback;
        closeComment(art);
        cg.toast(T.actThanks);
      } catch (err) { cg.toast(T.actFeedbackFailed + ': ' + err.message); }
    });
    input.addEventListener('keydown', (e) => { if (e.key === 'Escape') { e.stopPropagation(); closeComment(art); } });
    art.append(form);
    input.focus();
  }

  // ---------- regenerate ----------
  function regenerate(messageId) {
    if (!state.current || busy()) return;
    const clientMsgId = cg.randomId();
    if (!cg.send({ type: 'chat.regenerate', sessionId: state.current, messageId: Number(messageId), clientMsgId })) { cg.toast(T.offline); return; }
    // A hidden placeholder stands for the (already shown) question, so the run that starts is
    // recognised as this tab's own; the run's answer goes where the regenerated one was.
    const ph = cg.messageEl('USER');
    ph.classList.add('pending', 'regen-placeholder');
    ph.hidden = true;
    els.messages.append(ph);
    state.pending.set(clientMsgId, ph);
    state.regen = { sessionId: state.current, answer: String(messageId), clientMsgId };
  }
  cg.on('frame:run.started', (f) => {
    const rg = state.regen;
    for (const ph of els.messages.querySelectorAll('.regen-placeholder')) ph.remove();
    if (!rg || rg.sessionId !== f.sessionId) { adoptQuestion(f); return; }
    const run = state.runs.get(f.sessionId);
    const old = els.messages.querySelector('.msg[data-id="' + rg.answer + '"]');
    if (run && old) {
      // The new version takes the old one's place; the old one is one click away.
      const group = old._versions || { list: [old] };
      group.list[group.list.length - 1].after(run.el);
      group.list.push(run.el);
      for (const a of group.list) a._versions = group;
      showVersion(group, group.list.length - 1);
    }
    rg.runId = f.runId;
  });
  cg.on('frame:run.finished', (f) => {
    const rg = state.regen;
    if (rg && rg.sessionId === f.sessionId) {
      state.regen = null;
      // The stored history now holds the new version; render it so ids and versions are exact.
      if (f.sessionId === state.current) cg.send({ type: 'session.open', sessionId: f.sessionId });
    }
  });
  cg.on('frame:error', (f) => {
    if (state.regen && f.clientMsgId && f.clientMsgId === state.regen.clientMsgId) {
      state.regen = null;
      for (const ph of els.messages.querySelectorAll('.regen-placeholder')) ph.remove();
    }
  });

  // adoptQuestion gives the question this tab just sent its stored id (from run.started), so it
  // can be edited at once.
  function adoptQuestion(f) {
    if (f.sessionId !== state.current || !f.userMessageId) return;
    const users = els.messages.querySelectorAll('.msg.user:not([data-id])');
    const art = users[users.length - 1];
    if (!art) return;
    art.id = 'msg-' + f.userMessageId;
    const text = art.querySelector('.bubble') ? art.querySelector('.bubble').textContent : '';
    decorate(art, { id: f.userMessageId, role: 'USER', content: text });
  }

  // ---------- versions ----------
  function showVersion(group, i) {
    group.at = i;
    group.list.forEach((a, j) => {
      a.hidden = j !== i;
      const nav = a.querySelector('.versions');
      if (nav) updateNav(nav, group, j);
    });
  }
  function updateNav(nav, group, j) {
    nav.querySelector('.count').textContent = (j + 1) + '/' + group.list.length;
    nav.querySelector('.prev').disabled = j === 0;
    nav.querySelector('.next').disabled = j === group.list.length - 1;
  }
  function addVersionNav(art, group) {
    const bar = art.querySelector(':scope > .msg-actions');
    if (!bar || group.list.length < 2) return;
    const old = bar.querySelector('.versions');
    if (old) old.remove();
    const nav = el('span', 'versions');
    nav.setAttribute('role', 'group');
    nav.setAttribute('aria-label', T.actVersions);
    const prev = button('prev', T.actPrev, '‹');
    const next = button('next', T.actNext, '›');
    const count = el('span', 'count');
    count.setAttribute('aria-live', 'polite');
    nav.append(prev, count, next);
    prev.addEventListener('click', () => step(art, -1));
    next.addEventListener('click', () => step(art, 1));
    bar.prepend(nav);
    updateNav(nav, group, group.list.indexOf(art));
  }
  function step(art, d) {
    const g = art._versions;
    const j = g.list.indexOf(art) + d;
    if (j < 0 || j >= g.list.length) return;
    showVersion(g, j);
    const nav = g.list[j].querySelector('.versions ' + (d < 0 ? '.prev' : '.next'));
    const target = nav && !nav.disabled ? nav : g.list[j].querySelector('.versions .count');
    if (target && target.focus) target.focus();
  }

  // groupVersions runs after a history (or a page of it) is rendered: the answers to one question
  // (the first asking and every regenerateOf pointing at it) become versions of one reply at the
  // first answer's place. It reads what decorate kept on the articles, so it works over every page
  // of history the page holds, and it can run again from scratch.
  function groupVersions() {
    const all = [...els.messages.querySelectorAll('.msg[data-id]')];
    for (const a of all) {
      if (a._versions) { delete a._versions; a.hidden = false; }
      const nav = a.querySelector(':scope > .msg-actions .versions');
      if (nav) nav.remove();
    }
    const ids = new Set(all.map((a) => a.dataset.id));
    const groups = new Map(); // first asking's id → {list}
    let current = null;
    for (const a of all) {
      if (a.classList.contains('user')) {
        const of = a.dataset.regenerateOf;
        current = of || a.dataset.id;
        a.hidden = !!(of && ids.has(of)); // the question is shown once
        continue;
      }
      if (current === null) continue;
      if (!groups.has(current)) groups.set(current, { list: [] });
      groups.get(current).list.push(a);
    }
    for (const g of groups.values()) {
      if (g.list.length < 2) continue;
      // Keep the versions together where the first one was.
      let prev = g.list[0];
      for (const a of g.list.slice(1)) { prev.after(a); prev = a; }
      for (const a of g.list) { a._versions = g; addVersionNav(a, g); }
      showVersion(g, g.list.length - 1);
    }
  }

  // ---------- edit and resend ----------
  function startEdit(art, m) {
    if (busy()) return;
    const bubble = art.querySelector('.bubble');
    if (!bubble || art.querySelector('.edit-form')) return;
    const form = el('form', 'edit-form');
    const ta = el('textarea');
    ta.value = m.content !== undefined ? m.content : bubble.textContent;
    ta.rows = Math.min(8, Math.max(2, ta.value.split('\n').length));
    ta.setAttribute('aria-label', T.actEditLabel);
    const ok = el('button', 'act primary', T.actEditSend);
    ok.type = 'submit';
    const cancel = el('button', 'act', T.actEditCancel);
    cancel.type = 'button';
    form.append(ta, ok, cancel);
    bubble.hidden = true;
    const bar = art.querySelector(':scope > .msg-actions');
    if (bar) bar.hidden = true;
    art.insertBefore(form, bubble.nextSibling);
    const done = () => { form.remove(); bubble.hidden = false; if (bar) bar.hidden = false; };
    cancel.addEventListener('click', () => { done(); art.querySelector('.edit').focus(); });
    ta.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') { e.stopPropagation(); done(); }
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) { e.preventDefault(); form.requestSubmit(); }
    });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const text = ta.value.trim();
      if (!text || busy()) return;
      const clientMsgId = cg.randomId();
      if (!cg.send({ type: 'chat.edit', sessionId: state.current, messageId: Number(m.id), text, clientMsgId })) { cg.toast(T.offline); return; }
      done();
      const pending = cg.appendUser(text);
      state.pending.set(clientMsgId, pending);
      setTimeout(() => state.pending.delete(clientMsgId), 30000);
    });
    ta.focus();
  }

  cg.on('message-rendered', decorate);
  // Registered after render.js's handler, so the history is on the page when this runs.
  cg.on('frame:session.history', (f) => { if (f.sessionId === state.current) groupVersions(); });

  Object.assign(cg, { copyText, showVersion });
})();
