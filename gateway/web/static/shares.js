// citegate desktop view: the "Shared links" view. A button in the sidebar (also in the phone
// drawer) opens a modal dialog listing the user's own live links (GET /api/shares?scope=own): each
// with its chat, when it was created, what it covers (messages, up to when), how often others
// opened it and when last, and copy / open / revoke. Revoking asks first, then the link is gone
// from the list and its page 404s. The dialog is a native <dialog> opened with showModal(), so
// focus stays inside it and Esc closes it; focus goes back to what opened it.
'use strict';

(() => {
  const cg = window.citegate;
  const { el } = cg;
  cg.addTexts({
    zh: {
      shTitle: '分享链接', shOpenView: '分享链接', shClose: '关闭', shLoading: '正在加载…', shFailed: '无法加载分享链接',
      shRetry: '重试', shEmpty: '你还没有分享过对话。在对话顶部点“分享”即可创建只读链接，之后可以在这里查看和撤销。',
      shCreated: '创建于', shCovers: '包含 {n} 条消息', shUpTo: '截至 {t}', shViews: '{n} 次查看', shNoViews: '还没有人查看',
      shLastViewed: '最近查看 {t}', shCopy: '复制链接', shOpen: '打开', shRevoke: '撤销',
      shRevokeConfirm: '撤销后，任何持有此链接的人都无法再打开它。确定撤销吗？', shRevokeYes: '撤销链接', shRevokeNo: '取消',
      shRevoked: '链接已撤销', shGone: '对话已删除', shLegacy: '早期创建的链接，地址未保存，只能撤销。', shUntitled: '未命名对话',
      shCopied: '已复制分享链接', shCount: '共 {n} 个链接',
    },
    en: {
      shTitle: 'Shared links', shOpenView: 'Shared links', shClose: 'Close', shLoading: 'Loading…', shFailed: 'Could not load your shared links',
      shRetry: 'Retry', shEmpty: 'You have not shared a chat yet. Use Share at the top of a chat to make a read-only link; you can find and revoke it here.',
      shCreated: 'Created', shCovers: '{n} messages', shUpTo: 'up to {t}', shViews: '{n} views', shNoViews: 'Not viewed yet',
      shLastViewed: 'last viewed {t}', shCopy: 'Copy link', shOpen: 'Open', shRevoke: 'Revoke',
      shRevokeConfirm: 'After revoking, nobody holding this link can open it. Revoke it?', shRevokeYes: 'Revoke link', shRevokeNo: 'Cancel',
      shRevoked: 'Link revoked', shGone: 'Chat deleted', shLegacy: 'An early link whose address was not kept: it can only be revoked.', shUntitled: 'Untitled chat',
      shCopied: 'Share link copied', shCount: '{n} links',
    },
  });
  const T = cg.T;
  const sep = cg.lang === 'en' ? ', ' : '，';
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => String(vars[k]));
  const when = (iso) => {
    if (!iso) return '';
    const d = new Date(iso);
    return isNaN(d) ? '' : d.toLocaleString(cg.lang === 'en' ? 'en-GB' : 'zh-CN', { dateStyle: 'medium', timeStyle: 'short' });
  };
  const timeEl = (iso) => {
    const t = el('time', '', when(iso));
    t.dateTime = iso;
    return t;
  };

  // ---------- the opener, in the sidebar above the account box ----------
  const opener = el('button', 'shares-open link', T.shOpenView);
  opener.type = 'button';
  opener.id = 'shares-btn';
  opener.setAttribute('aria-haspopup', 'dialog');
  const me = document.querySelector('#sidebar .me');
  if (me) me.before(opener); else document.getElementById('sidebar').append(opener);

  // ---------- the dialog ----------
  const dlg = el('dialog', 'shares-dialog');
  dlg.id = 'shares-view';
  dlg.setAttribute('aria-labelledby', 'shares-title');
  const head = el('header', 'shares-head');
  const title = el('h2', '', T.shTitle);
  title.id = 'shares-title';
  const count = el('span', 'shares-count muted');
  const close = el('button', 'link shares-close', '✕');
  close.type = 'button';
  close.id = 'shares-close';
  close.setAttribute('aria-label', T.shClose);
  head.append(title, count, close);
  const status = el('p', 'shares-status muted');
  status.setAttribute('role', 'status');
  const list = el('ul', 'share-list');
  list.id = 'share-list';
  // The page's toast lies under a modal dialog (the top layer), so the view announces its own.
  const note = el('p', 'shares-note');
  note.setAttribute('role', 'status');
  note.hidden = true;
  dlg.append(head, status, list, note);
  function say(msg) {
    note.textContent = msg;
    note.hidden = false;
    clearTimeout(say.t);
    say.t = setTimeout(() => { note.hidden = true; }, 3500);
  }
  document.body.append(dlg);

  let returnTo = null;
  let loadSeq = 0;

  async function open() {
    returnTo = document.activeElement;
    // In the phone drawer the opener disappears with the drawer: focus goes back to the menu button.
    if (document.body.classList.contains('drawer-open') && cg.closeDrawer) {
      cg.closeDrawer(false);
      returnTo = document.getElementById('menu-btn');
    }
    if (!dlg.open) dlg.showModal();
    close.focus();
    await load();
  }
  function closeView() { if (dlg.open) dlg.close(); }
  dlg.addEventListener('close', () => {
    loadSeq++;
    const to = returnTo;
    returnTo = null;
    if (to && to.isConnected && to.getClientRects().length) to.focus();
  });
  // A click on the backdrop (outside the panel's box) closes, as Esc does.
  dlg.addEventListener('click', (e) => {
    if (e.target !== dlg) return;
    const r = dlg.getBoundingClientRect();
    if (e.clientX < r.left || e.clientX > r.right || e.clientY < r.top || e.clientY > r.bottom) closeView();
  });
  opener.addEventListener('click', open);
  close.addEventListener('click', closeView);

  async function load() {
    const seq = ++loadSeq;
    status.hidden = false;
    status.replaceChildren(T.shLoading);
    list.replaceChildren();
    count.textContent = '';
    let body;
    try {
      body = await cg.api('GET', '/api/shares?scope=own');
    } catch (err) {
      if (seq !== loadSeq) return;
      const retry = el('button', 'link shares-retry', T.shRetry);
      retry.type = 'button';
      retry.addEventListener('click', load);
      status.replaceChildren(T.shFailed + ': ' + err.message + ' ', retry);
      return;
    }
    if (seq !== loadSeq) return;
    render((body.shares || []).filter((s) => s.own !== false));
  }

  function render(shares) {
    list.replaceChildren(...shares.map(item));
    syncEmpty();
  }
  function syncEmpty() {
    const n = list.children.length;
    status.hidden = n > 0;
    status.replaceChildren(n ? '' : T.shEmpty);
    status.classList.toggle('shares-empty', !n);
    count.textContent = n ? fmt(T.shCount, { n }) : '';
  }

  function item(s) {
    const li = el('li', 'share-item');
    li.dataset.id = s.id;
    if (s.token) li.dataset.token = s.token;
    const h = el('h3', 'share-chat', s.live ? (s.title || T.shUntitled) : T.shGone);
    if (!s.live) h.classList.add('muted');
    const meta = el('p', 'share-meta');
    const created = el('span', 'share-created');
    created.append(T.shCreated + ' ', timeEl(s.createdAt));
    const cover = el('span', 'share-cover');
    cover.append(fmt(T.shCovers, { n: s.messages || 0 }));
    if (s.watermarkAt) {
      const [before, after] = T.shUpTo.split('{t}');
      cover.append(sep, before, timeEl(s.watermarkAt), after || '');
    }
    const views = el('span', 'share-views');
    if (s.views > 0) {
      views.append(fmt(T.shViews, { n: s.views }));
      if (s.lastViewedAt) {
        const [before, after] = T.shLastViewed.split('{t}');
        views.append(sep, before, timeEl(s.lastViewedAt), after || '');
      }
    } else {
      views.append(T.shNoViews);
    }
    meta.append(created, cover, views);
    const actions = el('div', 'share-actions');
    if (s.url) {
      const url = el('input', 'share-link');
      url.type = 'text';
      url.readOnly = true;
      url.value = s.url;
      url.setAttribute('aria-label', (s.title || T.shUntitled) + ' · ' + T.shCopy);
      url.addEventListener('focus', () => url.select());
      const copy = el('button', 'share-copy', T.shCopy);
      copy.type = 'button';
      copy.addEventListener('click', async () => {
        url.select();
        try { await navigator.clipboard.writeText(s.url); } catch (_) { document.execCommand('copy'); }
        say(T.shCopied);
      });
      const openLink = el('a', 'share-open', T.shOpen);
      openLink.href = s.url;
      openLink.target = '_blank';
      openLink.rel = 'noopener noreferrer';
      actions.append(url, copy, openLink);
    } else {
      actions.append(el('p', 'share-legacy muted', T.shLegacy));
    }
    const revoke = el('button', 'share-revoke danger', T.shRevoke);
    revoke.type = 'button';
    const confirm = el('div', 'share-confirm');
    confirm.hidden = true;
    confirm.setAttribute('role', 'alert');
    const yes = el('button', 'danger share-revoke-yes', T.shRevokeYes);
    yes.type = 'button';
    const no = el('button', 'share-revoke-no', T.shRevokeNo);
    no.type = 'button';
    confirm.append(el('p', '', T.shRevokeConfirm), yes, no);
    actions.append(revoke);
    revoke.addEventListener('click', () => { revoke.hidden = true; confirm.hidden = false; no.focus(); });
    no.addEventListener('click', () => { confirm.hidden = true; revoke.hidden = false; revoke.focus(); });
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      try {
        // By id: it names every link, also the early ones whose token was not kept.
        await cg.api('DELETE', '/api/shares/' + encodeURIComponent(s.id));
      } catch (err) {
        yes.disabled = false;
        say(err.message);
        return;
      }
      const next = li.nextElementSibling || li.previousElementSibling;
      li.remove();
      syncEmpty();
      say(T.shRevoked);
      cg.emit('share-revoked', s);
      const target = next && (next.querySelector('.share-copy') || next.querySelector('.share-revoke'));
      (target || close).focus();
    });
    li.append(h, meta, actions, confirm);
    return li;
  }

  // A link revoked from the chat's share box disappears here too, if the view is open.
  cg.on('share-revoked', (s) => {
    for (const li of list.querySelectorAll('li.share-item')) {
      if (li.dataset.id === s.id || (s.token && li.dataset.token === s.token)) li.remove();
    }
    if (dlg.open) syncEmpty();
  });

  Object.assign(cg, { openShares: open, closeShares: closeView });
})();
