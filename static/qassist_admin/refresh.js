/* Admin pages showing background work that is not done yet (a draft queued or being written, a
   batch queued or running, a document queued or being indexed: elements with data-qa-busy)
   reload every few seconds until it is, so its place in the queue and its progress stay
   current. Never while the person is doing something on the page: rows ticked, a field
   focused, a file chosen, text selected. A static file: the Content-Security-Policy allows no
   inline script. */
(function () {
  "use strict";
  var SECONDS = 5;
  if (!document.querySelector("[data-qa-busy]")) return;

  function busyPerson() {
    var active = document.activeElement;
    if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
    if (document.querySelector("#result_list input.action-select:checked")) return true;
    var inputs = document.querySelectorAll("input[type=file]");
    for (var i = 0; i < inputs.length; i++) {
      if (inputs[i].files && inputs[i].files.length) return true;
    }
    var selection = window.getSelection();
    return Boolean(selection && String(selection).length);
  }

  function tick() {
    if (document.hidden || busyPerson()) {
      window.setTimeout(tick, SECONDS * 1000);
      return;
    }
    window.location.reload();
  }

  window.setTimeout(tick, SECONDS * 1000);
})();
