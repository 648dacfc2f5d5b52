// citegate desktop view: index.html runs this right after the chat the server rendered into the
// page, before the first paint, so the reader sees the chat's end (where a conversation goes on)
// rather than the oldest message of its newest page. It blocks the parser for one property write.
'use strict';

(() => {
  const box = document.getElementById('messages');
  if (box) box.scrollTop = box.scrollHeight;
})();
