/* The conversation: message elements, a reply's status and badges, the actions under each
 * message, scrolling. Model output goes through QassistMarkdown.render (sanitised); user text is
 * only ever set as textContent. */

import { badge, div, iconButton } from "./dom.js";
import { feedbackButtons, ratable } from "./feedback.js";
import { announce, ANNOUNCE_CHARS } from "./notices.js";
import { els, md, state } from "./page.js";
import { linkCitations, renderSources } from "./sources.js";
import { regenerate, startEdit, versionSwitcher } from "./versions.js";

// --- messages ------------------------------------------------------------------------------

let labelSeq = 0;

/** A message's element; a reply's `question` is the user message it answers (its grounding
 * says whether the documents had anything on it). */
export function messageEl(m, live, question) {
  const el = div("msg msg-" + m.role);
  el.dataset.id = String(m.id);
  el.dataset.role = m.role;
  // Screen readers hear who speaks, and can jump message to message by heading.
  const label = document.createElement("h2");
  label.className = "visually-hidden";
  label.id = "msg-label-" + ++labelSeq;
  label.textContent = m.role === "user" ? "You said:" : "qassist said:";
  el.setAttribute("role", "article");
  el.setAttribute("aria-labelledby", label.id);
  el.append(label);
  const body = div("msg-body");
  if (m.role === "user") {
    body.append(div("bubble", m.content));
  } else {
    const avatar = div("ai-avatar", "q");
    avatar.setAttribute("aria-hidden", "true");
    el.append(avatar);
    const note = div("msg-note", "Not from the company’s documents: they had nothing on this question.");
    note.setAttribute("role", "note");
    const warning = div("msg-warning");
    warning.setAttribute("role", "note");
    warning.hidden = true;
    const sources = div("sources");
    sources.hidden = true;
    body.append(div("md"), warning, note, sources, div("msg-status"));
    el._question = question || null;
  }
  body.append(div("msg-actions"));
  el.append(body);
  el._message = m;
  if (m.role === "assistant") updateAssistant(el, m, !!live);
  return el;
}

/** How an interrupted reply ended, by finish_reason: the user's own Stop is not a failure. */
const INTERRUPTED = {
  cancelled: ["stopped", "You stopped this reply; the text so far is kept."],
  disconnected: ["connection lost", "The connection was lost during this reply; the text so far is kept."],
};

export function announceReply(el, m) {
  if (m.status === "error") return; // the notice (role=alert) says what went wrong
  let text = el.querySelector(".md").textContent.trim().replace(/\s+/g, " ");
  if (text.length > ANNOUNCE_CHARS) text = text.slice(0, ANNOUNCE_CHARS) + "… (continues in the conversation)";
  const ending = INTERRUPTED[m.finish_reason] && m.status === "interrupted" ? " (" + INTERRUPTED[m.finish_reason][0] + ")" : "";
  announce("qassist said: " + (text || "nothing") + ending);
}

// The support check's warning ends a reply's stored text (so REST, exports and shares carry it);
// the chat shows it apart, as a note of its own, where it cannot be mistaken for the answer.
const WARNED = new Set(["unsupported", "not_found"]);
const WARNING_START = /\n\n\*(Not in the documents|Not found in the documents|文档中没有依据|文档中没有找到依据)/;

/** The reply's text and its warning, apart (the warning without its Markdown emphasis). */
export function splitWarning(m) {
  const content = m.content || "";
  if (!WARNED.has(m.verdict)) return [content, ""];
  const match = content.match(WARNING_START);
  if (!match) return [content, ""];
  const note = content.slice(match.index).trim().replace(/^\*+|\*+$/g, "");
  return [content.slice(0, match.index), note];
}

export function updateAssistant(el, m, live) {
  el._message = m;
  const streaming = m.status === "streaming";
  el.classList.toggle("streaming", streaming && live);
  el.dataset.verdict = m.verdict || "";
  const body = el.querySelector(".md");
  const [text, warning] = splitWarning(m);
  const warningEl = el.querySelector(".msg-warning");
  warningEl.textContent = warning;
  warningEl.hidden = !warning;
  if (m.content) {
    md.render(body, text, !streaming);
    linkCitations(body, m.sources);
  } else if (streaming && live) {
    body.replaceChildren(waitingEl(null));
  } else {
    body.replaceChildren();
  }
  const status = el.querySelector(".msg-status");
  const parts = [];
  if (m.served_from_cache) {
    parts.push(badge("cached", "cached answer", "A prepared answer from your administrators; the model was not asked."));
  } else if (m.model) {
    parts.push(badge("model", m.model, "The model that wrote this reply."));
  }
  if (m.status === "interrupted") {
    const [text, why] = INTERRUPTED[m.finish_reason] || ["cut off", "The reply ended before its end; the text so far is kept."];
    parts.push(badge("interrupted", text, why));
  } else if (m.status === "complete" && m.finish_reason === "length") {
    parts.push(badge("length", "stopped at the length limit"));
  } else if (streaming && !live) {
    parts.push(badge("streaming", "still being written…"));
  }
  if (m.status === "error" || (m.status === "interrupted" && m.error && !INTERRUPTED[m.finish_reason])) {
    const error = div("msg-error", m.error || "The reply failed.");
    error.setAttribute("role", "note");
    parts.push(error);
  }
  status.replaceChildren(...parts);
  renderSources(el, m, m.content);
  el.querySelector(".msg-note").hidden = !(el._question && el._question.grounding === "none_found");
}

/** A reply's text while it streams (`final` once it stops changing), its [n] markers linked
 * and its sources marked as they are cited. */
export function renderReplyText(el, text, final) {
  const body = el.querySelector(".md");
  md.render(body, text, final);
  linkCitations(body, el._message && el._message.sources);
  if (el._message) renderSources(el, el._message, text);
}

export function waitingEl(position, wait) {
  const el = div("waiting");
  const dots = div("dots");
  dots.append(document.createElement("span"), document.createElement("span"), document.createElement("span"));
  el.append(dots);
  if (position) el.append(document.createTextNode("Waiting in line — you are number " + position + (wait ? " (" + wait + ")" : "")));
  return el;
}

/** A queued frame's `estimated_wait` (seconds, or null when unknown) as a person reads it. */
export function aboutWait(seconds) {
  if (typeof seconds !== "number") return "";
  if (seconds < 1.5) return "starting any moment";
  if (seconds < 90) return "about " + Math.round(seconds) + " s to go";
  return "about " + Math.round(seconds / 60) + " min to go";
}

export function findMsg(id) {
  return els.messages.querySelector('.msg[data-id="' + CSS.escape(String(id)) + '"]');
}

export function renderThread(messages) {
  els.messages.replaceChildren(...messages.map((m, i) => messageEl(m, false, messages[i - 1])));
  els.empty.hidden = messages.length > 0 || !!state.sessionId;
  refreshActions();
}

export function refreshActions() {
  const all = Array.from(els.messages.children);
  const lastOf = (role) => [...all].reverse().find((el) => el.dataset.role === role && !el.classList.contains("pending"));
  const lastUser = lastOf("user");
  const lastAssistant = lastOf("assistant");
  const canAct = !state.busy && !!state.sessionId && !state.readOnly;
  all.forEach((el, i) => {
    el.classList.toggle("last", i === all.length - 1);
    const actions = el.querySelector(".msg-actions");
    if (!actions) return;
    const m = el._message || {};
    const buttons = [];
    if (m.versions && m.versions.length > 1) buttons.push(versionSwitcher(el, m, canAct));
    if (m.content && m.status !== "streaming") {
      const copy = iconButton("copy", "Copy", async () => {
        if (await md.copyText(el._message.content)) md.flashCopied(copy, false);
      });
      buttons.push(copy);
    }
    // Any question can be edited: the conversation goes on from the edited copy (a new branch).
    if (el.dataset.role === "user" && canAct && typeof m.id === "number") {
      buttons.push(iconButton("edit", el === lastUser ? "Edit and resend" : "Edit and resend from here", () => startEdit(el)));
    }
    if (el === lastAssistant && canAct && el === all[all.length - 1]) {
      buttons.push(iconButton("regenerate", "Regenerate", regenerate, "regenerate"));
    }
    if (!state.readOnly && ratable(m) && !el.classList.contains("pending")) buttons.push(...feedbackButtons(el));
    actions.replaceChildren(...buttons);
  });
}


// --- scrolling ---------------------------------------------------------------------------

export function nearBottom() {
  const t = els.thread;
  return t.scrollHeight - t.scrollTop - t.clientHeight < 120;
}

export function scrollToBottom() {
  els.thread.scrollTop = els.thread.scrollHeight;
}

export function setTitle(title) {
  els.title.textContent = title || "New chat";
  document.title = (title ? title + " · " : "") + "qassist";
}
