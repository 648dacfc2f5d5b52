// citegate desktop view: sources. A card for a citation superscript on hover, keyboard focus and
// tap (title, site, retrieval time, first lines of the excerpt — all read from the answer's own
// sources list, no request; old answers without a lead fetch the excerpt once); the excerpt panel
// shows the excerpt as the server's sanitised markdown and sits beside the answer on wide screens;
// the tool lines of each answer's run are drawn from history the way a live run draws them.
'use strict';

(() => {
  const cg = window.citegate;
  const { T, els, el, lang } = cg;
  const txt = lang === 'en'
    ? { source: 'Source', open: 'Show in sources', close: 'Close', site: 'Site', kb: 'Knowledge base' }
    : { source: '来源', open: '在来源列表中查看', close: '关闭', site: '网站', kb: '知识库' };
  const when = (iso) => new Date(iso).toLocaleString(lang === 'en' ? 'en' : 'zh-CN');

  // ---------- tool lines from history ----------
  function toolLine(t) {
    let arg = '';
    try { const a = JSON.parse(t.arguments || '{}'); arg = a.query || a.url || ''; } catch (_) { /* shown only when it parses */ }
    const label = !t.ok ? T.toolFailed : t.tool === 'web_search' ? T.searched : t.tool === 'open_web_page' ? T.read : T.toolDone;
    const line = el('div', 'tool ' + (t.ok ? 'ok' : 'fail'), label);
    line.dataset.call = t.callId || '';
    if (arg) line.append(el('span', 'arg', String(arg).slice(0, 120)));
    return line;
  }
  cg.on('message-rendered', (art, m) => {
    if (!m || !Array.isArray(m.tools) || !m.tools.length) return;
    const bubble = art.querySelector('.bubble');
    if (!bubble || bubble.querySelector('.activity')) return; // a live run drew its own
    const activity = el('div', 'activity');
    activity.append(...m.tools.map(toolLine));
    bubble.prepend(activity);
  });

  // ---------- excerpt panel: markdown, beside the answer ----------
  cg.on('excerpt-shown', (p) => {
    if (typeof p.excerptHtml === 'string' && p.excerptHtml) {
      els.excerptText.innerHTML = p.excerptHtml; // sanitised on the server (markdown.RenderExcerpt)
      els.excerptText.classList.add('md');
    } else {
      els.excerptText.classList.remove('md');
    }
    if (p.site) {
      // As the sources list: a corpus page named like its site says "knowledge base", not its title twice.
      const chip = el('span', 'src-domain', p.site === p.title ? txt.kb : p.site);
      els.excerptMeta.prepend(chip);
    }
  });
  // The panel is a dialog named by its title; its text scrolls, so the keyboard must reach it.
  els.excerpt.setAttribute('aria-labelledby', 'excerpt-title');
  els.excerptText.tabIndex = 0;
  // The page makes room for the panel while it is open (CSS decides where: beside the answer on
  // wide screens, a bottom sheet on phones).
  new MutationObserver(() => {
    document.body.classList.toggle('excerpt-open', !els.excerpt.hidden);
  }).observe(els.excerpt, { attributes: true, attributeFilter: ['hidden'] });

  // ---------- source card ----------
  const card = el('div', 'src-card');
  card.id = 'src-card';
  card.setAttribute('role', 'tooltip');
  card.hidden = true;
  document.body.append(card);
  let current = null; // the superscript link the card describes
  let hideTimer = 0;
  const leads = new Map(); // "message:n" → lead fetched for an answer recorded without one

  function entryFor(ref) {
    const id = decodeURIComponent((ref.getAttribute('href') || '').slice(1));
    return id ? document.getElementById(id) : null;
  }
  function leadOf(excerpt) {
    const lines = String(excerpt || '').split('\n')
      .map((l) => l.replace(/^\s*(?:[>*+-]\s+|#+\s+)+/, '').replace(/^\|(.*)\|\s*$/, (_, c) => c.split('|').map((x) => x.trim()).filter((x) => x && !/^:?-+:?$/.test(x)).join(' · ')).trim())
      .filter((l) => l && !/^(```|~~~)/.test(l));
    const s = lines.slice(0, 3).join('\n');
    return s.length > 200 ? s.slice(0, 199) + '…' : s;
  }
  function fill(ref, entry) {
    const a = entry.querySelector(':scope > a');
    const site = entry.querySelector('.src-domain');
    const time = entry.querySelector('.src-time');
    const lead = entry.querySelector('.src-lead');
    const num = entry.querySelector('.src-num');
    const head = el('div', 'src-card-head');
    head.append(el('span', 'src-num', num ? num.textContent : ''));
    const title = el('a', 'src-card-title', a ? a.textContent : '');
    if (a) { title.href = a.href; title.target = '_blank'; title.rel = 'noopener noreferrer'; }
    head.append(title);
    const meta = el('div', 'src-card-meta');
    if (site) meta.append(el('span', 'src-domain', site.textContent));
    if (time && time.getAttribute('datetime')) meta.append(el('span', 'src-card-time', T.retrieved + ' ' + when(time.getAttribute('datetime'))));
    const body = el('p', 'src-card-lead', lead ? lead.textContent : '');
    card.replaceChildren(head, meta, body);
    if (!lead) {
      const btn = entry.querySelector('button.src-preview');
      if (!btn) { body.remove(); return; }
      const key = btn.dataset.message + ':' + btn.dataset.n;
      if (leads.has(key)) { body.textContent = leads.get(key); return; }
      body.textContent = T.excerptLoading;
      cg.api('GET', '/api/messages/' + encodeURIComponent(btn.dataset.message) + '/citations/' + encodeURIComponent(btn.dataset.n) + '/preview')
        .then((p) => { leads.set(key, leadOf(p.excerpt)); if (current === ref) body.textContent = leads.get(key); })
        .catch(() => { if (current === ref) body.textContent = T.excerptFailed; });
    }
  }
  function place(ref) {
    const r = ref.getBoundingClientRect();
    const w = Math.min(340, window.innerWidth - 16);
    card.style.width = w + 'px';
    const left = Math.max(8, Math.min(r.left + r.width / 2 - w / 2, window.innerWidth - w - 8));
    card.style.left = left + 'px';
    const h = card.offsetHeight;
    const below = r.bottom + 6;
    card.style.top = (below + h > window.innerHeight - 8 && r.top - h - 6 > 8 ? r.top - h - 6 : below) + 'px';
  }
  function show(ref) {
    clearTimeout(hideTimer);
    const entry = entryFor(ref);
    if (!entry) return;
    if (current && current !== ref) current.removeAttribute('aria-describedby');
    current = ref;
    fill(ref, entry);
    card.hidden = false;
    ref.setAttribute('aria-describedby', card.id);
    place(ref);
  }
  function hide() {
    clearTimeout(hideTimer);
    card.hidden = true;
    if (current) current.removeAttribute('aria-describedby');
    current = null;
  }
  function hideSoon() {
    clearTimeout(hideTimer);
    hideTimer = setTimeout(hide, 250); // time to move the pointer into the card
  }
  const refOf = (t) => (t && t.closest ? t.closest('sup.cite-ref a') : null);

  document.addEventListener('mouseover', (e) => {
    const ref = refOf(e.target);
    if (ref) { show(ref); return; }
    if (card.contains(e.target)) clearTimeout(hideTimer);
  });
  document.addEventListener('mouseout', (e) => {
    if (refOf(e.target) || card.contains(e.target)) hideSoon();
  });
  document.addEventListener('focusin', (e) => {
    const ref = refOf(e.target);
    if (ref) show(ref);
    else if (!card.contains(e.target)) hide();
  });
  // A tap shows the card instead of jumping to the sources list (there is no hover on a phone);
  // the card's number links there. A mouse click keeps jumping (excerpt.js). A second tap on the
  // same superscript closes the card. Whether the card was open is read at pointerdown: a tap's
  // compatibility mouseover and its focus open the card before the click arrives, so at click
  // time it is always open and a toggle then would close it at once.
  let touched = false;
  let openAtTap = false;
  document.addEventListener('pointerdown', (e) => {
    touched = e.pointerType === 'touch' || e.pointerType === 'pen';
    const ref = refOf(e.target);
    openAtTap = !!ref && current === ref && !card.hidden;
  }, true);
  document.addEventListener('click', (e) => {
    const ref = refOf(e.target);
    const tap = touched;
    touched = false; // a later click without a pointer (Enter on the link) is not a tap
    if (ref && tap) {
      e.preventDefault();
      e.stopImmediatePropagation();
      if (openAtTap) hide(); else show(ref);
      return;
    }
    if (!ref && !card.contains(e.target)) hide();
  }, true);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !card.hidden) { hide(); }
  });
  window.addEventListener('resize', () => { if (current && !card.hidden) place(current); });
  els.messages.addEventListener('scroll', () => { if (!card.hidden) hide(); }, { passive: true });

  Object.assign(cg, { showSourceCard: show, hideSourceCard: hide });
})();
