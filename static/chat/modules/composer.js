/* The composer: the message box, Enter to send (never while an input method composes), Stop,
 * and what a refused message puts back. */

import { messageEl, refreshActions, scrollToBottom } from "./messages.js";
import { announce, clearNotice } from "./notices.js";
import { $, els, state, touchTyping } from "./page.js";
import { renderRoom, scheduleMeasure, startNewWithDraft, tooLongText } from "./room.js";
import { sendFrame } from "./socket.js";

// --- the composer --------------------------------------------------------------------------

export function autosize() {
  els.input.style.height = "auto";
  els.input.style.height = Math.min(els.input.scrollHeight, 220) + "px";
}

export function updateComposer() {
  const streaming = !!state.reply;
  els.stop.hidden = !streaming;
  els.stop.disabled = false;
  els.send.hidden = streaming;
  const tooLong = !!(state.room && state.room.content === els.input.value && !state.room.fits);
  // While a file starts a new conversation, a message would start another one.
  els.send.disabled = state.busy || !state.connected || !els.input.value.trim() || tooLong || state.startingChat;
}

let composing = false;

/** Enter sends; Shift+Enter is a new line; Enter that confirms an IME's choice is not a send.
 * On a touch keyboard Enter is always a new line. */
function isSendKey(event) {
  if (event.key !== "Enter" || event.shiftKey || touchTyping()) return false;
  // isComposing: Chrome, Firefox. keyCode 229: Safari sends compositionend before keydown.
  return !(event.isComposing || composing || event.keyCode === 229);
}

export function submitComposer() {
  const content = els.input.value;
  if (!content.trim() || state.busy || state.startingChat) return;
  if (state.room && state.room.content === content && !state.room.fits) {
    announce(tooLongText(state.room)); // already shown under the composer: say it, send nothing
    els.room.classList.add("shake");
    setTimeout(() => els.room.classList.remove("shake"), 400);
    return;
  }
  if (!sendFrame({ type: "chat.send", session: state.sessionId, content })) return;
  state.busy = true;
  const el = messageEl({ id: "pending", role: "user", content }, false);
  el.classList.add("pending");
  els.messages.append(el);
  state.pending = { kind: "send", content, el };
  els.input.value = "";
  state.room = null;
  renderRoom();
  autosize();
  els.empty.hidden = true;
  clearNotice();
  updateComposer();
  refreshActions();
  scrollToBottom();
}

function stop() {
  if (!state.reply) return;
  els.stop.disabled = true;
  sendFrame({ type: "chat.stop", session: state.sessionId });
}

/** The frame was refused before a reply started: put things back as they were. */
export function restorePending() {
  const p = state.pending;
  state.pending = null;
  if (!p) return;
  if (p.kind === "send") {
    if (p.el) p.el.remove();
    if (!els.input.value.trim()) {
      els.input.value = p.content;
      autosize();
    }
    els.empty.hidden = els.messages.children.length > 0 || !!state.sessionId;
  } else if (p.kind === "edit") {
    p.el.querySelector(".bubble").textContent = p.original;
  }
  els.messages.querySelectorAll(".pending").forEach((el) => el.classList.remove("pending"));
}

/** The composer's own events: typing, sending, stopping, the suggestions of an empty chat. */
export function wireComposer() {
  els.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    submitComposer();
  });
  els.input.addEventListener("compositionstart", () => { composing = true; });
  els.input.addEventListener("compositionend", () => { composing = false; });
  els.input.addEventListener("blur", () => { composing = false; });
  els.input.addEventListener("keydown", (event) => {
    if (isSendKey(event)) {
      event.preventDefault();
      submitComposer();
    }
  });
  els.input.addEventListener("input", () => {
    autosize();
    updateComposer();
    scheduleMeasure(false);
  });
  $("room-new").addEventListener("click", startNewWithDraft);
  els.stop.addEventListener("click", stop);
  document.addEventListener("keydown", (event) => {
    const inOtherField = event.target !== els.input && event.target.matches("input, textarea, select");
    if (event.key === "Escape" && state.reply && !inOtherField) stop();
  });
  for (const button of document.querySelectorAll(".suggestion")) {
    // A suggestion is sent at once; offline, it waits in the composer like typed text.
    button.addEventListener("click", () => {
      els.input.value = button.dataset.prompt;
      autosize();
      updateComposer();
      if (state.connected && !state.busy) submitComposer();
      else els.input.focus();
    });
  }
}
