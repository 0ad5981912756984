/* Room left: the token counter under the composer (docs/ui.md, "Room left"). */

import { updateComposer } from "./composer.js";
import { postJSON } from "./http.js";
import { announce } from "./notices.js";
import { $, data, els, state } from "./page.js";

// --- room left: the counter under the composer --------------------------------------------

const ROOM_SHOW_SHARE = 0.5; // the counter appears once half the model's window is used
const ROOM_SHOW_CHARS = 4000; // ... or for a long message, whatever the window
export const DRAFT_KEY = "qassist.draft"; // a message carried over to a new conversation
let measureTimer = 0;
let measureSeq = 0;
const fmt = (n) => Number(n).toLocaleString("en-US");

/** Measure what the composer holds against the model's window, shortly after typing stops. */
export function scheduleMeasure(now) {
  clearTimeout(measureTimer);
  const content = els.input.value;
  if (!content.trim()) {
    state.room = null;
    renderRoom();
    return;
  }
  if (content.length > data.maxMessageChars) {
    // Over the message limit: no need to ask the server to count it.
    state.room = { content, message_chars: content.length, message_char_limit: data.maxMessageChars, tokens: null, fits: false, fits_alone: false };
    renderRoom();
    return;
  }
  measureTimer = setTimeout(measureNow, now ? 0 : 250);
}

async function measureNow() {
  const seq = ++measureSeq;
  const content = els.input.value;
  let room = null;
  try {
    room = await postJSON(data.urls.measure, { session: state.sessionId, content });
  } catch (_) {
    return; // the counter is a help; the server still refuses a turn that does not fit
  }
  if (seq !== measureSeq || content !== els.input.value) return;
  room.content = content;
  state.room = room;
  renderRoom();
}

export function tooLongText(r) {
  if (r.serverText) return r.serverText;
  if (r.message_chars > r.message_char_limit) {
    return "This message is " + fmt(r.message_chars) + " characters long; a message holds at most " + fmt(r.message_char_limit) + ". Shorten it to send it.";
  }
  const withHistory = !!state.sessionId;
  const size = r.tokens === null ? "too long" : fmt(r.tokens) + " tokens";
  if (withHistory && r.fits_alone) {
    return "With the conversation so far this comes to " + size + "; the model reads " + fmt(r.token_limit) + " at most. Shorten the message, or start a new conversation with it.";
  }
  return "This message comes to " + size + "; the model reads " + fmt(r.token_limit) + " at most. Shorten it to send it.";
}

/** "N of M tokens used", saying what else the prompt holds: the conversation so far (not on a
 * new chat, which has none) and the person's custom instructions. */
export function usedText(r) {
  const held = [];
  if (state.sessionId) held.push("the conversation so far");
  if (r.instructions_tokens) held.push("your custom instructions (" + fmt(r.instructions_tokens) + ")");
  const base = fmt(r.tokens) + " of " + fmt(r.token_limit) + " tokens used";
  return held.length ? base + ", " + held.join(" and ") + " included" : base;
}

export function renderRoom() {
  const r = state.room && state.room.content === els.input.value ? state.room : null;
  const box = els.room;
  const wasOver = box.classList.contains("over");
  if (!r) {
    box.hidden = true;
    box.classList.remove("over");
    updateComposer();
    return;
  }
  const newChat = $("room-new");
  if (!r.fits) {
    const text = tooLongText(r);
    els.roomText.textContent = text;
    box.classList.add("over");
    newChat.hidden = !(state.sessionId && r.fits_alone);
    box.hidden = false;
    if (!wasOver) announce(text);
  } else {
    box.classList.remove("over");
    newChat.hidden = true;
    const share = r.tokens / r.token_limit;
    box.hidden = share < ROOM_SHOW_SHARE && r.message_chars < ROOM_SHOW_CHARS;
    els.roomText.textContent = usedText(r);
  }
  updateComposer();
}

/** The way out when the history is what makes a message too long: a new conversation,
 * the message waiting in its composer. */
export function startNewWithDraft() {
  try {
    sessionStorage.setItem(DRAFT_KEY, els.input.value);
  } catch (_) {
    /* private mode: the text is not carried over */
  }
  location.assign(data.urls.index);
}
