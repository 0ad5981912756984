/* Dark mode: the page follows the system (prefers-color-scheme) until the toggle is used; then
 * the choice is remembered (localStorage "qassist.theme") and applied before the first paint
 * by static/chat/theme-init.js. */

export const THEME_KEY = "qassist.theme";
const systemDark = window.matchMedia("(prefers-color-scheme: dark)");

export function currentTheme() {
  const chosen = document.documentElement.dataset.theme;
  if (chosen === "dark" || chosen === "light") return chosen;
  return systemDark.matches ? "dark" : "light";
}

function show(button) {
  const dark = currentTheme() === "dark";
  button.setAttribute("aria-pressed", String(dark));
  const label = dark ? "Dark mode is on" : "Dark mode";
  button.title = label;
}

/** The toggle button (#theme-toggle): switch, remember, and keep up with the system. */
export function wireTheme() {
  const button = document.getElementById("theme-toggle");
  if (!button) return;
  show(button);
  button.addEventListener("click", () => {
    const next = currentTheme() === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try {
      localStorage.setItem(THEME_KEY, next);
    } catch (_) {
      /* not remembered: still switched for this page */
    }
    show(button);
  });
  systemDark.addEventListener("change", () => show(button));
}
