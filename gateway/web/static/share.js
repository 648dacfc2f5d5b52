// citegate desktop view: the Share button and its link box (copy, revoke, close).
'use strict';

(() => {
  const cg = window.citegate;
  const { T, els, state } = cg;

  function hideShare() { els.shareBox.hidden = true; state.shareToken = null; }
  els.shareBtn.addEventListener('click', async () => {
    if (!state.current) return;
    try {
      const s = await cg.api('POST', '/api/sessions/' + encodeURIComponent(state.current) + '/shares');
      state.shareToken = s.token;
      els.shareURL.value = s.url;
      els.shareBox.hidden = false;
      els.shareURL.select();
    } catch (err) { cg.toast(T.shareFailed + ': ' + err.message); }
  });
  els.shareCopy.addEventListener('click', async () => {
    els.shareURL.select();
    try { await navigator.clipboard.writeText(els.shareURL.value); } catch (_) { document.execCommand('copy'); }
    cg.toast(T.copied);
  });
  els.shareRevoke.addEventListener('click', async () => {
    if (!state.shareToken) return;
    try {
      await cg.api('DELETE', '/api/shares/' + encodeURIComponent(state.shareToken));
      hideShare();
      cg.toast(T.revoked);
    } catch (err) { cg.toast(err.message); }
  });
  els.shareClose.addEventListener('click', hideShare);

  Object.assign(cg, { hideShare });
})();
