/* The theme before the first paint (a classic script in <head>, no inline script under the CSP):
 * the one a person chose with the toggle, remembered in localStorage, else the system's
 * (prefers-color-scheme, in app.css). static/chat/modules/theme.js wires the toggle. */
(function () {
  "use strict";
  try {
    const chosen = localStorage.getItem("qassist.theme");
    if (chosen === "dark" || chosen === "light") document.documentElement.dataset.theme = chosen;
  } catch (_) {
    /* storage off: the system's theme */
  }
})();
