// citegate desktop view: the interface-language switcher (中文 / English / follow the browser) in the
// account box — the sidebar on wide screens, the drawer on phones. The choice is stored with the
// user on the server (PUT /api/me/settings), so it follows the user to every browser and device.
//
// Switching reloads the page: the interface strings, and the answers' server-rendered HTML (the
// sources list, tool lines), come in the page's language, and a reload is the one way every part
// is re-rendered consistently. The reload keeps the open chat (it is in the URL), the composer's
// draft (sessionStorage, this tab only) and the keyboard focus on the switcher. The user's other
// tabs hear of the change over the websocket (settings.updated) and reload too, once no answer is
// streaming in them.
'use strict';

(() => {
  const cg = window.citegate;
  const { $, els, state } = cg;
  cg.addTexts({
    zh: { langFailed: '无法切换语言' },
    en: { langFailed: 'Could not change the language' },
  });
  const group = document.querySelector('.me-lang');
  if (!group) return;
  const buttons = Array.from(group.querySelectorAll('button.lang-opt'));
  const DRAFT = 'citegate.draft';
  const REFOCUS = 'citegate.langFocus';

  // effective is the language a choice renders in here: the choice, else what the browser prefers
  // (the server decides from Accept-Language the same way: English when it comes first).
  const effective = (choice) => choice || ((navigator.language || '').toLowerCase().startsWith('en') ? 'en' : 'zh');

  function store(key, value) {
    try { sessionStorage.setItem(key, value); } catch (_) { /* storage disabled: lose only the nicety */ }
  }
  function take(key) {
    try {
      const v = sessionStorage.getItem(key);
      if (v !== null) sessionStorage.removeItem(key);
      return v;
    } catch (_) { return null; }
  }

  function reloadKeepingDraft(refocus) {
    if (els.input.value) store(DRAFT, els.input.value);
    if (refocus) store(REFOCUS, '1');
    location.reload();
  }

  function press(choice) {
    for (const b of buttons) b.setAttribute('aria-pressed', String(b.dataset.choice === choice));
  }

  let busy = false;
  async function choose(btn) {
    if (busy || btn.getAttribute('aria-pressed') === 'true') return;
    busy = true;
    const before = buttons.find((b) => b.getAttribute('aria-pressed') === 'true');
    press(btn.dataset.choice);
    try {
      const out = await cg.api('PUT', '/api/me/settings', { language: btn.dataset.choice });
      if (out.effectiveLanguage !== cg.lang) {
        reloadKeepingDraft(true);
        return;
      }
      // The same language as before (e.g. "follow the browser" while it says Chinese anyway):
      // nothing on the page changes.
    } catch (e) {
      press(before ? before.dataset.choice : '');
      cg.toast(cg.T.langFailed + (e && e.message ? ': ' + e.message : ''));
    }
    busy = false;
  }
  for (const b of buttons) b.addEventListener('click', () => choose(b));

  // Another tab or device of this user changed the language.
  let pendingReload = false;
  const runsLive = () => Array.from(state.runs.values()).some((r) => !r.done);
  function reloadWhenIdle() {
    if (runsLive()) { pendingReload = true; return; }
    reloadKeepingDraft(false);
  }
  cg.on('frame:settings.updated', (f) => {
    press(f.language || '');
    if (busy) return; // this tab asked: its own request reloads it
    if (effective(f.language || '') !== cg.lang) reloadWhenIdle();
  });
  cg.on('frame:run.finished', () => {
    // Let the page finish the run's own handling first.
    if (pendingReload) setTimeout(reloadWhenIdle, 0);
  });

  // After a switch: the draft comes back, and keyboard focus returns to the switcher (on a phone,
  // inside the drawer it was in).
  function restore() {
    const draft = take(DRAFT);
    if (draft !== null && !els.input.value) els.input.value = draft;
    if (take(REFOCUS) !== '1') return;
    const menu = $('menu-btn');
    if (menu && menu.getClientRects().length > 0 && menu.getAttribute('aria-expanded') !== 'true') menu.click();
    const pressed = buttons.find((b) => b.getAttribute('aria-pressed') === 'true');
    if (pressed) pressed.focus();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', restore);
  else setTimeout(restore, 0);
})();
