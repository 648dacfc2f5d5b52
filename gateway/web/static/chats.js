// citegate desktop view: chat management. A search box above the chat list (server-side search
// over titles and conversation text, GET /api/search), and a "⋯" menu in the chat header: rename,
// export (Markdown, JSONL) and delete (which also revokes the chat's share links). Every tab of the
// user follows renames and deletions through the session.updated and session.deleted frames.
'use strict';

(() => {
  const cg = window.citegate;
  const { els, state, el } = cg;
  cg.addTexts({
    zh: {
      chSearch: '搜索对话', chNoResults: '没有找到匹配的对话', chPartial: '只搜索了最近的部分对话',
      chMenu: '对话操作', chRename: '重命名', chRenameLabel: '对话标题', chExportMD: '导出 Markdown',
      chExportJSONL: '导出 JSONL', chDelete: '删除对话', chDeleteConfirm: '删除这个对话、它的全部消息和分享链接？',
      chDeleteYes: '删除', chDeleteNo: '取消', chDeleted: '对话已删除', chRenamed: '已重命名', chFailed: '操作失败',
      chTitleMatch: '标题匹配', chOlder: '没有在这个对话里找到那条消息',
    },
    en: {
      chSearch: 'Search chats', chNoResults: 'No chat matches', chPartial: 'Only the most recent chats were searched',
      chMenu: 'Chat actions', chRename: 'Rename', chRenameLabel: 'Chat title', chExportMD: 'Export Markdown',
      chExportJSONL: 'Export JSONL', chDelete: 'Delete chat', chDeleteConfirm: 'Delete this chat, all its messages and its share links?',
      chDeleteYes: 'Delete', chDeleteNo: 'Cancel', chDeleted: 'Chat deleted', chRenamed: 'Renamed', chFailed: 'Failed',
      chTitleMatch: 'title matches', chOlder: 'The message was not found in this chat',
    },
  });
  const T = cg.T;

  // ---------- search ----------
  const searchForm = el('form', 'chat-search');
  searchForm.setAttribute('role', 'search');
  const searchInput = el('input');
  searchInput.type = 'search';
  searchInput.id = 'chat-search';
  searchInput.placeholder = T.chSearch;
  searchInput.setAttribute('aria-label', T.chSearch);
  searchInput.autocomplete = 'off';
  searchForm.append(searchInput);
  const results = el('ul', 'sessions search-results');
  results.id = 'search-results';
  results.hidden = true;
  const resultNote = el('p', 'search-note muted');
  resultNote.setAttribute('role', 'status');
  resultNote.hidden = true;
  const nav = els.sessions.closest('nav') || els.sessions.parentElement;
  nav.before(searchForm);
  nav.prepend(resultNote, results);

  let searchSeq = 0;
  let searchTimer = null;
  function clearSearch() {
    searchSeq++;
    results.hidden = true;
    resultNote.hidden = true;
    els.sessions.hidden = false;
  }
  async function runSearch(q) {
    const seq = ++searchSeq;
    let body;
    try {
      body = await cg.api('GET', '/api/search?q=' + encodeURIComponent(q));
    } catch (err) {
      if (seq === searchSeq) { resultNote.textContent = T.chFailed + ': ' + err.message; resultNote.hidden = false; }
      return;
    }
    if (seq !== searchSeq) return; // a later query's answer wins
    const list = body.results || [];
    results.replaceChildren(...list.map((r) => {
      const li = el('li');
      const a = el('a', r.session.id === state.current ? 'active' : '', r.session.title || T.newChat);
      a.href = cg.chatURL(r.session.id);
      a.dataset.id = r.session.id;
      if (r.messages && r.messages.length) a.dataset.msg = r.messages[0].id;
      li.append(a);
      for (const m of r.messages || []) {
        const s = el('a', 'snippet', m.snippet);
        s.href = cg.chatURL(r.session.id);
        s.dataset.id = r.session.id;
        s.dataset.msg = m.id;
        li.append(s);
      }
      return li;
    }));
    const notes = [];
    if (!list.length) notes.push(T.chNoResults);
    if (body.truncated) notes.push(T.chPartial);
    resultNote.textContent = notes.join(' · ');
    resultNote.hidden = !notes.length;
    results.hidden = false;
    els.sessions.hidden = true;
  }
  searchInput.addEventListener('input', () => {
    clearTimeout(searchTimer);
    const q = searchInput.value.trim();
    if (!q) { clearSearch(); return; }
    searchTimer = setTimeout(() => runSearch(q), 200);
  });
  searchForm.addEventListener('submit', (e) => {
    e.preventDefault();
    clearTimeout(searchTimer);
    const q = searchInput.value.trim();
    if (q) runSearch(q); else clearSearch();
  });
  searchInput.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && searchInput.value) { e.stopPropagation(); searchInput.value = ''; clearSearch(); }
  });
  results.addEventListener('click', (e) => {
    const a = e.target.closest('a[data-id]');
    if (!a) return;
    e.preventDefault();
    state.jumpTo = a.dataset.msg || null;
    state.jumpTries = 0;
    if (a.dataset.id === state.current) {
      jump();
    } else {
      cg.openSession(a.dataset.id);
    }
    cg.emit('search-picked', a.dataset.id);
  });
  // jump shows the message a search result pointed at, once its chat is on the page.
  function jump() {
    const id = state.jumpTo;
    if (!id) return;
    const art = document.getElementById('msg-' + id);
    state.jumpTo = null;
    if (!art) {
      // The page shows the newest part of a long chat; the match is further up: load earlier
      // pages (history-more.js) until it is on the page, a bounded number of times.
      const more = els.messages.querySelector('.load-earlier');
      if (more && !more.disabled && (state.jumpTries = (state.jumpTries || 0) + 1) <= 40) {
        state.jumpTo = id;
        more.click();
        return;
      }
      state.jumpTries = 0;
      cg.toast(T.chOlder);
      return;
    }
    state.jumpTries = 0;
    if (art.hidden && art._versions && cg.showVersion) cg.showVersion(art._versions, art._versions.list.indexOf(art));
    art.scrollIntoView({ block: 'center' });
    art.classList.remove('search-hit');
    void art.offsetWidth;
    art.classList.add('search-hit');
    art.tabIndex = -1;
    art.focus({ preventScroll: true });
  }
  cg.on('frame:session.history', (f) => { if (f.sessionId === state.current) jump(); });

  // ---------- chat menu: rename, export, delete ----------
  const menu = el('details', 'chat-menu');
  const summary = el('summary', '', '⋯');
  summary.setAttribute('aria-label', T.chMenu);
  summary.title = T.chMenu;
  const body = el('div', 'chat-menu-body');
  const renameBtn = el('button', 'menu-item rename', T.chRename);
  renameBtn.type = 'button';
  const mdLink = el('a', 'menu-item export-md', T.chExportMD);
  const jsonlLink = el('a', 'menu-item export-jsonl', T.chExportJSONL);
  const deleteBtn = el('button', 'menu-item delete danger', T.chDelete);
  deleteBtn.type = 'button';
  const confirmBox = el('div', 'delete-confirm');
  confirmBox.hidden = true;
  confirmBox.setAttribute('role', 'alert');
  const confirmText = el('p', '', T.chDeleteConfirm);
  const yes = el('button', 'danger delete-yes', T.chDeleteYes);
  yes.type = 'button';
  const no = el('button', 'delete-no', T.chDeleteNo);
  no.type = 'button';
  confirmBox.append(confirmText, yes, no);
  body.append(renameBtn, mdLink, jsonlLink, deleteBtn, confirmBox);
  menu.append(summary, body);
  els.shareBtn.before(menu);

  function syncMenu() {
    menu.hidden = !state.current;
    if (!state.current) { menu.open = false; return; }
    const base = '/api/sessions/' + encodeURIComponent(state.current);
    mdLink.href = base + '/export.md?lang=' + cg.lang;
    jsonlLink.href = base + '/export.jsonl';
    mdLink.setAttribute('download', '');
    jsonlLink.setAttribute('download', '');
  }
  // The confirmation is put away when the menu closes, not when it opens: the toggle event is a
  // task queued after the opening click, and a tap on 删除对话 can be handled before it (input
  // runs ahead of other tasks on a busy page), so resetting on open hid the confirmation just asked.
  // The reset also runs at the opening click itself (before the details element opens, so before any
  // tap inside it): toggle events coalesce, and a menu closed and opened again before the closing
  // toggle ran gets one toggle with open = true, which would keep the old confirmation up and
  // 删除对话 hidden.
  const resetConfirm = () => { confirmBox.hidden = true; deleteBtn.hidden = false; };
  summary.addEventListener('click', () => { if (!menu.open) resetConfirm(); });
  menu.addEventListener('toggle', () => {
    if (menu.open) { syncMenu(); return; }
    resetConfirm();
  });
  menu.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && menu.open) { e.stopPropagation(); menu.open = false; resetConfirm(); summary.focus(); }
  });
  cg.on('session-opened', syncMenu);
  cg.on('sessions-rendered', syncMenu);
  cg.on('start', syncMenu);

  renameBtn.addEventListener('click', () => {
    menu.open = false;
    startRename();
  });
  function startRename() {
    const id = state.current;
    if (!id || document.getElementById('rename-form')) return;
    const cur = state.sessions.find((s) => s.id === id);
    const form = el('form', 'rename-form');
    form.id = 'rename-form';
    const input = el('input');
    input.type = 'text';
    input.maxLength = 120;
    input.value = (cur && cur.title) || els.title.textContent;
    input.setAttribute('aria-label', T.chRenameLabel);
    form.append(input);
    els.title.hidden = true;
    els.title.after(form);
    const done = () => { form.remove(); els.title.hidden = false; };
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') { e.stopPropagation(); done(); summary.focus(); }
    });
    input.addEventListener('blur', () => { if (form.isConnected && !form._saving) done(); });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const title = input.value.trim();
      if (!title) return;
      form._saving = true;
      try {
        const r = await cg.api('PATCH', '/api/sessions/' + encodeURIComponent(id), { title });
        applySession(r.session);
        cg.toast(T.chRenamed);
      } catch (err) { cg.toast(T.chFailed + ': ' + err.message); }
      done();
    });
    input.focus();
    input.select();
  }
  function applySession(s) {
    const i = state.sessions.findIndex((x) => x.id === s.id);
    if (i >= 0) state.sessions[i] = Object.assign({}, state.sessions[i], s);
    cg.renderSessions();
  }

  deleteBtn.addEventListener('click', () => {
    deleteBtn.hidden = true;
    confirmBox.hidden = false;
    no.focus();
  });
  no.addEventListener('click', () => { confirmBox.hidden = true; deleteBtn.hidden = false; deleteBtn.focus(); });
  yes.addEventListener('click', async () => {
    const id = state.current;
    if (!id) return;
    try {
      await cg.api('DELETE', '/api/sessions/' + encodeURIComponent(id));
      menu.open = false;
      removeSession(id);
      cg.toast(T.chDeleted);
    } catch (err) { cg.toast(T.chFailed + ': ' + err.message); }
  });
  function removeSession(id) {
    state.sessions = state.sessions.filter((s) => s.id !== id);
    for (const li of results.querySelectorAll('a[data-id]')) if (li.dataset.id === id) li.closest('li').remove();
    if (state.current === id) cg.openSession(null); else cg.renderSessions();
  }

  cg.on('frame:session.updated', (f) => { if (f.session) applySession(f.session); });
  cg.on('frame:session.deleted', (f) => { if (f.sessionId) removeSession(f.sessionId); });
})();
