// citegate desktop view: the page frame. On narrow screens the sidebar (chat list, user, sign-out)
// is a drawer behind the ☰ button: focus moves into it and stays there (Tab wraps), Esc or the
// backdrop closes it and focus returns to the button. Also: the reconnect countdown with
// "retry now" (and an immediate retry when the tab regains focus or the network returns), and the
// rate-limit countdown under the composer.
'use strict';

(() => {
  const cg = window.citegate;
  const { T, $, els, state } = cg;
  const menu = $('menu-btn');
  const side = $('sidebar');
  const backdrop = $('backdrop');
  const closeBtn = $('drawer-close');
  const retry = $('conn-retry');
  const narrow = matchMedia('(max-width: 720px)');

  // ---------- drawer ----------
  const focusable = () => Array.from(side.querySelectorAll('a[href], button:not([disabled]), input, select, textarea, [tabindex]:not([tabindex="-1"])'))
    .filter((e) => e.getClientRects().length > 0);
  const isOpen = () => document.body.classList.contains('drawer-open');

  function openDrawer() {
    if (!narrow.matches || isOpen()) return;
    document.body.classList.add('drawer-open');
    side.setAttribute('role', 'dialog');
    side.setAttribute('aria-modal', 'true');
    backdrop.hidden = false;
    menu.setAttribute('aria-expanded', 'true');
    // The rest of the page is out of reach while the drawer is open (and hidden from screen readers).
    for (const e of document.querySelectorAll('body > main, body > .excerpt')) e.inert = true;
    const active = side.querySelector('.sessions a.active');
    (active || focusable()[0] || side).focus();
    cg.emit('drawer', true);
  }
  function closeDrawer(returnFocus) {
    if (!isOpen()) return;
    document.body.classList.remove('drawer-open');
    side.removeAttribute('role');
    side.removeAttribute('aria-modal');
    backdrop.hidden = true;
    menu.setAttribute('aria-expanded', 'false');
    for (const e of document.querySelectorAll('body > main, body > .excerpt')) e.inert = false;
    if (returnFocus) menu.focus();
    cg.emit('drawer', false);
  }
  menu.addEventListener('click', () => (isOpen() ? closeDrawer(true) : openDrawer()));
  closeBtn.addEventListener('click', () => closeDrawer(true));
  backdrop.addEventListener('click', () => closeDrawer(true));
  side.addEventListener('keydown', (e) => {
    if (!isOpen()) return;
    if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); closeDrawer(true); return; }
    if (e.key !== 'Tab') return;
    const f = focusable();
    if (!f.length) return;
    const first = f[0];
    const last = f[f.length - 1];
    if (e.shiftKey && document.activeElement === first) { e.preventDefault(); last.focus(); }
    else if (!e.shiftKey && document.activeElement === last) { e.preventDefault(); first.focus(); }
  });
  // Picking a chat (or a new one) is what the drawer was opened for: close it and go to the chat.
  cg.on('session-opened', () => closeDrawer(false));
  // Growing past the breakpoint turns the drawer back into the sidebar.
  narrow.addEventListener('change', () => closeDrawer(false));

  // ---------- reconnect ----------
  let countdown = null;
  function stopCountdown() { clearInterval(countdown); countdown = null; }
  cg.on('reconnect-scheduled', () => {
    retry.hidden = false;
    stopCountdown();
    const tick = () => {
      const n = Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000));
      els.conn.textContent = T.retryingIn.replace('{n}', n);
    };
    tick();
    countdown = setInterval(tick, 1000);
  });
  retry.addEventListener('click', () => cg.reconnectNow());
  window.addEventListener('online', () => cg.reconnectNow());
  window.addEventListener('focus', () => cg.reconnectNow());
  document.addEventListener('visibilitychange', () => { if (!document.hidden) cg.reconnectNow(); });
  // connect() writes "connecting" itself; the countdown must not overwrite it.
  cg.on('connecting', () => { stopCountdown(); retry.hidden = true; });

  // ---------- rate limit ----------
  const notice = $('composer-notice');
  let limitTimer = null;
  cg.on('frame:error', (f) => {
    if (f.code !== 'rate_limited' || !(f.retryAfterMs > 0)) return;
    const until = Date.now() + f.retryAfterMs;
    clearInterval(limitTimer);
    const tick = () => {
      const n = Math.ceil((until - Date.now()) / 1000);
      if (n > 0) { notice.textContent = T.retryIn.replace('{n}', n); notice.hidden = false; return; }
      clearInterval(limitTimer);
      notice.textContent = T.canSend;
      setTimeout(() => { if (notice.textContent === T.canSend) notice.hidden = true; }, 4000);
    };
    tick();
    limitTimer = setInterval(tick, 1000);
  });

  Object.assign(cg, { openDrawer, closeDrawer });
})();
