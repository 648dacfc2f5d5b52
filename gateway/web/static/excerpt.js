// citegate desktop view: citation superscripts (jump to and flash the source entry) and the excerpt
// panel a source's preview button opens. Event delegation, so it works for every rendered message.
'use strict';

(() => {
  const cg = window.citegate;
  const { T, els, el, lang } = cg;

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

  const when = (iso) => new Date(iso).toLocaleString(lang === 'en' ? 'en' : 'zh-CN');

  async function showExcerpt(messageId, n, recheck) {
    if (!messageId || !n) return;
    els.excerpt.hidden = false;
    els.excerptTitle.textContent = '';
    els.excerptMeta.replaceChildren(el('span', '', T.excerptLoading));
    if (!recheck) els.excerptText.textContent = '';
    try {
      const q = recheck ? '?recheck=1' : '';
      const p = await cg.api('GET', '/api/messages/' + encodeURIComponent(messageId) + '/citations/' + encodeURIComponent(n) + '/preview' + q);
      els.excerptTitle.textContent = p.title || p.url;
      els.excerptTitle.title = p.url;
      const link = el('a', '', p.url);
      link.href = /^https?:\/\//i.test(p.url) ? p.url : '#';
      link.target = '_blank';
      link.rel = 'noopener noreferrer';
      const meta = [link];
      if (p.retrievedAt) meta.push(el('span', '', T.retrieved + ' ' + when(p.retrievedAt)));
      if (p.truncated) meta.push(el('span', '', T.truncated));
      if (p.recheck) {
        // The verdict in the page's language; the server's one-sentence detail as a tooltip.
        const rc = p.recheck;
        let label = T[rc.status] || rc.status;
        if (rc.status === 'changed' && typeof rc.similarity === 'number') label += ' (' + T.similarity + ' ' + Math.round(rc.similarity * 100) + '%)';
        const v = el('span', rc.status === 'unchanged' ? 'unchanged' : 'changed', label);
        v.title = (rc.detail || '') + (rc.checkedAt ? ' — ' + T.checked + ' ' + when(rc.checkedAt) : '');
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
      cg.emit('excerpt-shown', p);
    } catch (err) {
      els.excerptMeta.replaceChildren(el('span', 'changed', T.excerptFailed + ': ' + err.message));
    }
  }
  els.excerptClose.addEventListener('click', () => { els.excerpt.hidden = true; });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape') els.excerpt.hidden = true; });

  Object.assign(cg, { flash, showExcerpt });
})();
