// citegate desktop view: the composer (send, IME-safe Enter, stop) and refused sends.
'use strict';

(() => {
  const cg = window.citegate;
  const { T, els, state, send } = cg;

  function updateComposer() {
    const running = !!(state.current && state.runs.has(state.current));
    els.cancel.hidden = !running;
    els.send.disabled = running;
  }
  els.form.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = els.input.value.trim();
    if (!text || els.send.disabled) return;
    const clientMsgId = cg.randomId();
    const frame = { type: 'chat.send', text, clientMsgId };
    if (state.current) frame.sessionId = state.current;
    if (!send(frame)) { cg.toast(T.offline); return; }
    const art = cg.appendUser(text);
    state.pending.set(clientMsgId, art);
    // For an existing session the bubble is confirmed by run.started; keep only new-session ones.
    if (state.current) setTimeout(() => state.pending.delete(clientMsgId), 30000);
    els.input.value = '';
    autosize();
  });
  els.input.addEventListener('keydown', (e) => {
    // isComposing: Enter confirms an IME candidate (Chinese input) and must not send.
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      els.form.requestSubmit();
    }
  });
  function autosize() {
    els.input.style.height = 'auto';
    els.input.style.height = Math.min(els.input.scrollHeight + 2, window.innerHeight * 0.3) + 'px';
  }
  els.input.addEventListener('input', autosize);
  els.cancel.addEventListener('click', () => {
    if (state.current) send({ type: 'chat.cancel', sessionId: state.current });
  });

  cg.on('frame:error', (f) => {
    const pending = f.clientMsgId && state.pending.get(f.clientMsgId);
    if (pending) {
      state.pending.delete(f.clientMsgId);
      pending.classList.remove('pending');
      pending.classList.add('rejected');
      cg.addStatus(pending, 'failed', T.rejected + ': ' + (f.message || f.code));
      // The text was not sent: put it back in the composer unless something new was typed since.
      const sent = pending.querySelector('.bubble .plain');
      if (sent && !els.input.value.trim()) { els.input.value = sent.textContent; autosize(); }
    } else if (f.code === 'not_found' && f.sessionId && f.sessionId === state.current) {
      cg.openSession(null);
    }
    cg.toast(f.message || f.code || 'error');
    updateComposer();
  });
  cg.on('disconnected', updateComposer);

  Object.assign(cg, { updateComposer, autosize });
})();
