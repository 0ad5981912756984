/* The chat page's entry module: wires the modules (static/chat/modules/, map in docs/ui.md)
 * to the page and starts the connection. Loaded as <script type="module">: no build step, no
 * inline script. */

import { wireAttachments } from "./modules/attachments.js";
import { autosize, updateComposer, wireComposer } from "./modules/composer.js";
import { refreshActions, renderThread, scrollToBottom, setTitle } from "./modules/messages.js";
import { $, data, els, isPhone, state, touchTyping, urlFor } from "./modules/page.js";
import { wirePassageDialog } from "./modules/passage.js";
import { subscribe } from "./modules/replies.js";
import { DRAFT_KEY, scheduleMeasure } from "./modules/room.js";
import { wireSettings } from "./modules/settings.js";
import { updateConversationTools, wireShare } from "./modules/share.js";
import { noticeArchivedOpen, renderSidebar, showArchived, upsertSession, wireSidebar } from "./modules/sidebar.js";
import { connect } from "./modules/socket.js";
import { wireTheme } from "./modules/theme.js";

// --- wiring --------------------------------------------------------------------------------

/** A file dropped on a new chat started its conversation: the page moves to it, as a first
 * message's reply.start would. */
function chatStarted(session) {
  state.sessionId = session.id;
  // The chat is about the file now: the generic suggestions no longer fit it.
  $("suggestions").hidden = true;
  history.replaceState(null, "", urlFor("conversation", session.id));
  setTitle(session.title);
  upsertSession({ id: session.id, title: session.title, updated_at: session.updated_at });
  subscribe();
  updateComposer();
  refreshActions();
  updateConversationTools();
}

/** The print view's date: now, as the reader's clock says it (YYYY-MM-DD HH:MM). */
function stampPrintDate() {
  const now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const text = now.getFullYear() + "-" + pad(now.getMonth() + 1) + "-" + pad(now.getDate()) + " " + pad(now.getHours()) + ":" + pad(now.getMinutes());
  $("print-date").textContent = text;
  $("print-date").setAttribute("datetime", now.toISOString());
}

function wire() {
  stampPrintDate();
  window.addEventListener("beforeprint", stampPrintDate);
  wireComposer();
  wireSidebar();
  wireAttachments(chatStarted);
  wirePassageDialog();
  wireTheme();
  wireShare();
  wireSettings();
  $("skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    (state.readOnly ? $("restore-btn") : els.input).focus();
  });
  window.addEventListener("online", () => {
    if (!state.ws) connect();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && !state.ws) connect();
  });
}

function adaptToTouch() {
  const touch = touchTyping();
  document.documentElement.classList.toggle("touch", touch);
  els.input.setAttribute("enterkeyhint", touch ? "enter" : "send");
}

function init() {
  adaptToTouch();
  window.matchMedia("(pointer: coarse) and (hover: none)").addEventListener("change", adaptToTouch);
  state.sessions = Array.from(els.list.querySelectorAll(".session-item")).map((li) => ({
    id: li.dataset.sessionId,
    title: li.dataset.title || "",
    updated_at: li.dataset.updated,
    pinned: li.dataset.pinned === "1",
  }));
  renderSidebar();
  renderThread(data.messages);
  wire();
  if (state.readOnly) {
    // An archived conversation: read it, restore it or delete it; nothing to send.
    els.conn.hidden = true;
    showArchived(true, false);
    scrollToBottom();
    return;
  }
  let draft = null;
  try {
    draft = sessionStorage.getItem(DRAFT_KEY);
    sessionStorage.removeItem(DRAFT_KEY);
  } catch (_) {
    draft = null;
  }
  if (draft && !state.sessionId) {
    els.input.value = draft;
    scheduleMeasure(true);
  }
  noticeArchivedOpen();
  autosize();
  updateComposer();
  scrollToBottom();
  connect();
  if (!isPhone()) els.input.focus();
}

document.documentElement.classList.add("js");
init();
