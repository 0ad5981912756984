/* Frames from the server (docs/websocket.md): a reply's start, its pieces, its end, and
 * watching a conversation whose reply is written elsewhere. */

import { updateComposer } from "./composer.js";
import { onError } from "./errors.js";
import {
  aboutWait, announceReply, findMsg, messageEl, nearBottom, refreshActions, renderReplyText, scrollToBottom, setTitle,
  updateAssistant, waitingEl,
} from "./messages.js";
import { announce, clearNotice, showNotice } from "./notices.js";
import { els, isPhone, state, urlFor } from "./page.js";
import { updateConversationTools } from "./share.js";
import { renderSidebar, upsertSession } from "./sidebar.js";
import { resync, sendFrame } from "./socket.js";

// --- frames from the server ----------------------------------------------------------------

function onReplyStart(f) {
  state.busy = true;
  if (state.sessionId !== f.session.id) {
    state.sessionId = f.session.id;
    history.replaceState(null, "", urlFor("conversation", f.session.id));
    updateConversationTools();
  }
  setTitle(f.session.title);
  upsertSession({ id: f.session.id, title: f.session.title, updated_at: new Date().toISOString() });

  const pendingEl = state.pending && state.pending.kind === "send" ? state.pending.el : null;
  const userEl = messageEl(f.user_message, false);
  // Regenerate (the same user message) or edit (a new version of it, maybe sent from
  // another tab): the new version takes the place of the one shown and what followed it;
  // the earlier ones are a click away.
  const sibling = (f.user_message.versions || []).map(findMsg).find((el) => el);
  const edited = state.pending && state.pending.kind === "edit" ? state.pending.el : null;
  const existing = findMsg(f.user_message.id) || (edited && edited.isConnected ? edited : null) || sibling;
  if (existing) {
    const anchor = existing;
    while (anchor.nextElementSibling) anchor.nextElementSibling.remove();
    anchor.replaceWith(userEl);
  } else if (pendingEl && pendingEl.isConnected) {
    pendingEl.replaceWith(userEl);
  } else {
    els.messages.append(userEl);
  }
  state.pending = null;
  const replyEl = messageEl(f.reply, true, f.user_message);
  els.messages.append(replyEl);
  state.reply = { id: f.reply.id, el: replyEl, text: "", frame: 0, message: f.reply };
  announce("qassist is replying…");
  els.empty.hidden = true;
  updateComposer();
  refreshActions();
  scrollToBottom();
}

function onQueued(f) {
  const r = state.reply;
  if (!r || r.id !== f.reply_id) return;
  const wait = aboutWait(f.estimated_wait);
  if (!r.text) r.el.querySelector(".md").replaceChildren(waitingEl(f.position, wait));
  showNotice("info", "Many people are asking right now. You are number " + f.position + " in line" + (wait ? ", " + wait : "") + "; your reply starts as soon as a slot frees up.", [], "queued");
}

/** A piece of the reply at `offset`: pieces already held are skipped (the snapshot of a
 * resumed reply holds them), a gap asks for the whole text again. */
function onDelta(f) {
  const r = state.reply;
  if (!r || r.id !== f.reply_id) return; // a reply we hold no start of: its resume brings it
  const offset = typeof f.offset === "number" ? f.offset : r.text.length;
  if (offset + f.text.length <= r.text.length) return;
  if (offset > r.text.length) {
    subscribe(); // a piece went missing: the run sends the whole text so far
    return;
  }
  if (!r.text) clearNotice("queued");
  r.text = r.text.slice(0, offset) + f.text;
  if (!r.frame) r.frame = requestAnimationFrame(() => renderLive(r));
}

// --- watching a conversation: replies outlive sockets (docs/websocket.md) ---------------

let resumeTimer = 0;

export function subscribe() {
  if (!state.sessionId || state.readOnly) return;
  sendFrame({ type: "chat.subscribe", session: state.sessionId });
}

function onSubscribed(f) {
  if (f.session !== state.sessionId) return;
  clearTimeout(resumeTimer);
  state.lostDuringReply = false;
  if (f.streaming === null) {
    // Nothing being written: a reply we were showing (or the page was given) has ended.
    const shown = state.reply || Array.from(els.messages.querySelectorAll(".msg-assistant")).some((el) => el._message && el._message.status === "streaming");
    if (state.reply && state.reply.frame) cancelAnimationFrame(state.reply.frame);
    if (state.reply) {
      state.reply = null;
      state.busy = false;
    }
    if (shown) resync(0);
    updateComposer();
    refreshActions();
    return;
  }
  // A reply is being written: its run sends the text so far (reply.resume). A run whose
  // process died never answers: then the stored text is polled until the reply is closed.
  resumeTimer = setTimeout(() => {
    if (state.reply) {
      if (state.reply.frame) cancelAnimationFrame(state.reply.frame);
      state.reply = null;
      state.busy = false;
      updateComposer();
    }
    resync(1);
  }, 4000);
}

async function onResume(f) {
  const m = f.reply;
  clearTimeout(resumeTimer);
  let el = findMsg(m.id);
  if (!el) {
    await resync(0, true); // started elsewhere before we watched: draw the thread first
    el = findMsg(m.id);
    if (!el) return;
  }
  const r = state.reply;
  if (r && r.id === m.id) {
    if (m.content.length > r.text.length) r.text = m.content;
  } else {
    el.classList.remove("pending");
    state.reply = { id: m.id, el, text: m.content, frame: 0, message: m };
  }
  state.busy = true;
  const live = state.reply;
  live.el.classList.add("streaming");
  live.el.querySelector(".msg-status").replaceChildren();
  if (live.text) renderReplyText(live.el, live.text, false);
  else live.el.querySelector(".md").replaceChildren(waitingEl(null));
  updateComposer();
  refreshActions();
}

function renderLive(r) {
  r.frame = 0;
  if (state.reply !== r) return;
  const stick = nearBottom();
  renderReplyText(r.el, r.text, false);
  if (stick) scrollToBottom();
}

function onReplyDone(f) {
  const r = state.reply;
  const el = r && r.id === f.reply.id ? r.el : findMsg(f.reply.id);
  // reply.done carries no versions: they are the ones reply.start gave.
  const m = Object.assign({ versions: el && el._message ? el._message.versions : undefined }, f.reply);
  if (!m.versions) delete m.versions;
  if (r && r.frame) cancelAnimationFrame(r.frame);
  const stick = nearBottom();
  if (el) updateAssistant(el, m, false);
  if (el && r && r.id === m.id) announceReply(el, m);
  if (!r || r.id === m.id) {
    state.reply = null;
    state.busy = false;
  }
  clearNotice("queued");
  updateComposer();
  refreshActions();
  if (stick) scrollToBottom();
  if (!isPhone() && document.activeElement === document.body) els.input.focus();
}

function onSessionTitle(f) {
  if (!f.session || typeof f.session.title !== "string") return;
  const item = state.sessions.find((s) => s.id === f.session.id);
  if (item) {
    item.title = f.session.title;
    renderSidebar();
  }
  if (f.session.id === state.sessionId) setTitle(f.session.title);
}

export function handleFrame(f) {
  if (!f || typeof f !== "object") return;
  switch (f.type) {
    case "reply.start": onReplyStart(f); break;
    case "queued": onQueued(f); break;
    case "delta": onDelta(f); break;
    case "reply.done": onReplyDone(f); break;
    case "error": onError(f); break;
    case "session.title": onSessionTitle(f); break;
    case "subscribed": onSubscribed(f); break;
    case "reply.resume": onResume(f); break;
    default: break;
  }
}
