/* A Copy button for a secret shown once on an admin page (the new API key): a static file,
   since the Content-Security-Policy allows no inline script. The button stays hidden without
   script; the secret is selectable by hand either way. */
(function () {
  "use strict";

  function copy(button) {
    var source = document.getElementById(button.dataset.copyTarget);
    var status = document.getElementById(button.dataset.copyStatus);
    if (!source) return;
    var text = source.textContent.trim();

    function say(message) {
      if (status) status.textContent = message;
    }

    function selectIt() {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var copied = false;
      try {
        copied = document.execCommand("copy");
      } catch (e) {
        copied = false;
      }
      say(copied ? "Copied." : "Selected: press Ctrl+C (⌘C on a Mac) to copy.");
    }

    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () {
        say("Copied.");
      }, selectIt);
    } else {
      selectIt();
    }
  }

  document.querySelectorAll("button[data-copy-target]").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      copy(button);
    });
  });
})();
