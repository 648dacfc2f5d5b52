// citegate desktop view: the Share button and its link box (copy, revoke, close).
//
// Sharing a chat that already has a live link shows that link (never a new one) with what it covers.
// When the chat has grown since, the box offers a choice: "update" moves the same link forward, so
// whoever already holds it sees the newer messages too (PATCH /api/shares/{token}); "keep" leaves it
// showing what it showed. Without a live link, Share makes one (POST /api/sessions/{id}/shares).
'use strict';

(() => {
  const cg = window.citegate;
  const { els, state, el } = cg;
  cg.addTexts({
    zh: {
      sbCovers: '此链接包含 {n} 条消息，截至 {t}。', sbExisting: '这是此对话已有的分享链接。',
      sbNewer: '对话里有此链接之后的新消息，持有链接的人看不到它们。', sbUpdate: '更新链接，包含新消息',
      sbKeep: '保持原样', sbUpdated: '链接已更新，现在包含全部 {n} 条消息。', sbKept: '链接保持原样。',
      sbOfferLabel: '已有分享链接',
    },
    en: {
      sbCovers: 'This link shows {n} messages, up to {t}.', sbExisting: 'This chat already has this share link.',
      sbNewer: 'The chat has newer messages that people with the link do not see.', sbUpdate: 'Update the link to include them',
      sbKeep: 'Keep it as it is', sbUpdated: 'Link updated: it now shows all {n} messages.', sbKept: 'The link stays as it is.',
      sbOfferLabel: 'Existing share link',
    },
  });
  const T = cg.T;
  const gap = cg.lang === 'en' ? ' ' : ''; // between sentences: Chinese full stops need no space
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => String(vars[k]));
  const when = (iso) => {
    const d = new Date(iso);
    return iso && !isNaN(d) ? d.toLocaleString(cg.lang === 'en' ? 'en-GB' : 'zh-CN', { dateStyle: 'medium', timeStyle: 'short' }) : '';
  };

  // What the link covers, and the offer, inside the existing box (after the URL field).
  const info = el('p', 'share-info');
  info.id = 'share-info';
  info.setAttribute('role', 'status');
  const offer = el('div', 'share-offer');
  offer.id = 'share-offer';
  offer.hidden = true;
  offer.setAttribute('role', 'group');
  offer.setAttribute('aria-label', T.sbOfferLabel);
  const offerText = el('span', 'share-offer-text', T.sbNewer);
  const update = el('button', 'primary share-update', T.sbUpdate);
  update.type = 'button';
  const keep = el('button', 'share-keep', T.sbKeep);
  keep.type = 'button';
  offer.append(offerText, update, keep);
  els.shareBox.append(info, offer);

  let current = null; // the link in the box: {token, id, url, messages, watermarkAt, ...}

  function show(s, existing, newer) {
    current = s;
    state.shareToken = s.token;
    els.shareURL.value = s.url;
    const cover = s.watermarkAt ? fmt(T.sbCovers, { n: s.messages || 0, t: when(s.watermarkAt) }) : '';
    info.textContent = (existing ? T.sbExisting + gap : '') + cover;
    offer.hidden = !newer;
    update.disabled = false;
    els.shareBox.hidden = false;
  }
  function hideShare() {
    els.shareBox.hidden = true;
    state.shareToken = null;
    current = null;
    offer.hidden = true;
  }

  els.shareBtn.addEventListener('click', async () => {
    if (!state.current) return;
    const sid = state.current;
    try {
      const mine = await cg.api('GET', '/api/sessions/' + encodeURIComponent(sid) + '/shares');
      if (sid !== state.current) return;
      const live = (mine.shares || [])[0];
      if (live) {
        show(live, true, live.newer);
        (live.newer ? update : els.shareURL).focus();
        if (!live.newer) els.shareURL.select();
        return;
      }
      const s = await cg.api('POST', '/api/sessions/' + encodeURIComponent(sid) + '/shares');
      if (sid !== state.current) return;
      show(s, false, false);
      els.shareURL.select();
    } catch (err) { cg.toast(T.shareFailed + ': ' + err.message); }
  });
  update.addEventListener('click', async () => {
    if (!current) return;
    update.disabled = true;
    try {
      const s = await cg.api('PATCH', '/api/shares/' + encodeURIComponent(current.token || current.id), { watermark: 'latest' });
      show(s, false, false);
      info.textContent = fmt(T.sbUpdated, { n: s.messages || 0 }) + gap + info.textContent;
      els.shareURL.focus();
      els.shareURL.select();
    } catch (err) {
      update.disabled = false;
      cg.toast(T.shareFailed + ': ' + err.message);
    }
  });
  keep.addEventListener('click', () => {
    offer.hidden = true;
    info.textContent = T.sbKept + gap + info.textContent;
    els.shareURL.focus();
    els.shareURL.select();
  });
  els.shareCopy.addEventListener('click', async () => {
    els.shareURL.select();
    try { await navigator.clipboard.writeText(els.shareURL.value); } catch (_) { document.execCommand('copy'); }
    cg.toast(T.copied);
  });
  els.shareRevoke.addEventListener('click', async () => {
    if (!state.shareToken) return;
    const gone = current;
    try {
      await cg.api('DELETE', '/api/shares/' + encodeURIComponent(state.shareToken));
      hideShare();
      cg.toast(T.revoked);
      if (gone) cg.emit('share-revoked', gone);
    } catch (err) { cg.toast(err.message); }
  });
  els.shareClose.addEventListener('click', hideShare);
  els.shareBox.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') { e.stopPropagation(); hideShare(); els.shareBtn.focus(); }
  });

  Object.assign(cg, { hideShare });
})();
