// citegate desktop view: starts the page once every script has run. DOMContentLoaded fires after all
// deferred scripts, so feature files listed after this one still register their hooks before the
// first frame arrives.
'use strict';

document.addEventListener('DOMContentLoaded', () => {
  const cg = window.citegate;
  const { T, els, state, el } = cg;
  state.current = cg.sessionFromHash();
  els.shareBtn.disabled = !state.current;
  if (state.current) els.messages.replaceChildren(el('p', 'empty', T.connecting));
  cg.emit('start');
  cg.connect();
});
