/* What the page tells people beside the conversation: the polite live region (#announcer) a
 * screen reader hears without moving, and the one-line notice above the composer (role=alert). */

import { div, iconButton, textButton } from "./dom.js";
import { els, state } from "./page.js";

// --- the live region: what a screen reader hears without moving ---------------------------

export const ANNOUNCE_CHARS = 1500;

/** Say `text` once, politely (after what the reader is saying now). */
export function announce(text) {
  els.announcer.textContent = text;
}

// --- notices: one line above the composer ------------------------------------------------

export function clearNotice(tag) {
  if (tag && state.noticeTag !== tag) return;
  clearInterval(state.noticeTimer);
  state.noticeTimer = 0;
  state.noticeTag = "";
  els.notice.hidden = true;
  els.notice.replaceChildren();
}

/** kind: info | warn | error. actions: [{label, onClick, primary}]. */
export function showNotice(kind, text, actions, tag) {
  clearNotice();
  state.noticeTag = tag || kind;
  els.notice.className = "notice " + kind;
  const span = div("notice-text", text);
  const buttons = (actions || []).map((a) =>
    textButton(a.label, a.onClick, "btn" + (a.primary ? " btn-primary" : "")),
  );
  const close = iconButton("close", "Dismiss", () => clearNotice(), "notice-close");
  els.notice.replaceChildren(span, ...buttons, close);
  els.notice.hidden = false;
  return { span, buttons };
}

/** Count `seconds` down in the notice: text(left) each second, done() at zero. */
export function noticeCountdown(seconds, text, done) {
  const span = els.notice.querySelector(".notice-text");
  let left = Math.max(1, Math.ceil(seconds));
  span.textContent = text(left);
  state.noticeTimer = setInterval(() => {
    left -= 1;
    if (left <= 0) {
      clearInterval(state.noticeTimer);
      state.noticeTimer = 0;
      done();
    } else {
      span.textContent = text(left);
    }
  }, 1000);
}
