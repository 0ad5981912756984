/* The sidebar: conversations grouped by day (pinned ones first), search, rename, pin, the
 * archive (restore, delete for good), the drawer on a phone. */

import { div, iconButton } from "./dom.js";
import { postJSON, request } from "./http.js";
import { setTitle } from "./messages.js";
import { announce, clearNotice, showNotice } from "./notices.js";
import { $, data, els, state, urlFor } from "./page.js";

// --- the sidebar ---------------------------------------------------------------------------

function groupLabel(iso) {
  const day = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
  const days = Math.round((day(new Date()) - day(new Date(iso))) / 86400000);
  if (days <= 0) return "Today";
  if (days === 1) return "Yesterday";
  if (days < 7) return "Previous 7 days";
  if (days < 30) return "Previous 30 days";
  return "Older";
}

function sessionItemEl(item) {
  const li = document.createElement("li");
  li.className = "session-item" + (item.id === state.sessionId ? " active" : "");
  li.dataset.sessionId = item.id;
  const link = document.createElement("a");
  link.className = "session-link";
  link.href = urlFor("conversation", item.id);
  // The title in a span of its own: it ends with an ellipsis where it does not fit (a flex
  // link, as on a phone, would cut it mid-letter).
  const title = document.createElement("span");
  title.className = "session-title";
  title.textContent = item.title || "New chat";
  link.append(title);
  link.title = item.title || "New chat";
  const actions = div("session-actions");
  const name = item.title || "New chat";
  if (state.archivedView) {
    actions.append(
      iconButton("restore", "Restore " + name, () => restore(item)),
      iconButton("trash", "Delete " + name + " for good", () => deleteForGood(item)),
    );
  } else {
    const pin = iconButton("pin", "Pin " + name, () => setPinned(item, !item.pinned), "pin-btn");
    pin.setAttribute("aria-pressed", String(!!item.pinned));
    actions.append(
      pin,
      iconButton("rename", "Rename " + name, () => startRename(li, item)),
      iconButton("archive", "Archive " + name, () => archive(item)),
    );
  }
  li.append(link, actions);
  return li;
}

export function renderSidebar() {
  const nodes = [];
  let group = null;
  for (const item of state.sessions) {
    const pinned = item.pinned && !state.archivedView;
    const label = state.query ? "Results" : pinned ? "Pinned" : groupLabel(item.updated_at);
    if (label !== group) {
      group = label;
      const heading = document.createElement("li");
      heading.className = "session-heading";
      heading.textContent = label;
      nodes.push(heading);
    }
    nodes.push(sessionItemEl(item));
  }
  els.list.replaceChildren(...nodes);
  els.listEmpty.hidden = state.sessions.length > 0;
  els.listEmpty.textContent = state.query ? "No conversation matches." : state.archivedView ? "No archived conversations." : "No conversations yet.";
}

export function upsertSession(item) {
  if (state.archivedView) return;
  const before = state.sessions.find((s) => s.id === item.id);
  item.pinned = item.pinned === undefined ? !!(before && before.pinned) : item.pinned;
  const others = state.sessions.filter((s) => s.id !== item.id);
  // The latest used goes first among its kind: pinned ones stay above the rest.
  const at = item.pinned ? 0 : others.findIndex((s) => !s.pinned);
  others.splice(at < 0 ? others.length : at, 0, item);
  state.sessions = others;
  if (!state.query) renderSidebar();
}

/** Pin a conversation to the top of the list, or unpin it. */
async function setPinned(item, pinned) {
  try {
    await postJSON(urlFor("pin", item.id), { pinned });
  } catch (error) {
    showNotice("error", "Could not " + (pinned ? "pin" : "unpin") + ": " + error.message);
    return;
  }
  try {
    await loadSessions(); // the server's order: pinned first, latest pin first
  } catch (_) {
    item.pinned = pinned;
    renderSidebar();
  }
  const button = els.list.querySelector('.session-item[data-session-id="' + CSS.escape(item.id) + '"] .pin-btn');
  if (button) button.focus();
  announce((pinned ? "Pinned " : "Unpinned ") + "“" + (item.title || "New chat") + "”.");
}

function startRename(li, item) {
  const input = document.createElement("input");
  input.className = "session-rename";
  input.value = item.title;
  input.maxLength = 200;
  input.setAttribute("aria-label", "New title");
  li.replaceChildren(input);
  input.focus();
  input.select();
  let finished = false;
  let composingTitle = false;
  const finish = async (save) => {
    if (finished) return;
    finished = true;
    const title = input.value.trim();
    if (save && title && title !== item.title) {
      try {
        const result = await postJSON(urlFor("rename", item.id), { title });
        item.title = result.session.title;
        if (item.id === state.sessionId) setTitle(item.title);
      } catch (error) {
        showNotice("error", "Could not rename: " + error.message);
      }
    }
    renderSidebar();
  };
  input.addEventListener("compositionstart", () => { composingTitle = true; });
  input.addEventListener("compositionend", () => { composingTitle = false; });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.isComposing && !composingTitle && event.keyCode !== 229) {
      event.preventDefault();
      finish(true);
    } else if (event.key === "Escape") {
      finish(false);
    }
  });
  input.addEventListener("blur", () => finish(true));
}

// The conversation archived while it was open, carried to the new chat the page goes to.
const ARCHIVED_OPEN_KEY = "qassist-archived-open";

/** Archive at once (it can be undone): a notice offers Undo. The open one is archived like
 * any other: the page goes to a new chat, the list stays the list, and Undo (on the new
 * chat's page) restores it and goes back to it. */
async function archive(item) {
  try {
    await postJSON(urlFor("archive", item.id), {});
  } catch (error) {
    showNotice("error", "Could not archive: " + error.message);
    return;
  }
  if (item.id === state.sessionId) {
    try {
      sessionStorage.setItem(ARCHIVED_OPEN_KEY, JSON.stringify({ id: item.id, title: item.title || "" }));
    } catch (_) {
      /* private mode: the new chat comes without its Undo */
    }
    location.assign(data.urls.index);
    return;
  }
  state.sessions = state.sessions.filter((s) => s.id !== item.id);
  renderSidebar();
  archivedNotice(item, false);
}

function archivedNotice(item, reopen) {
  showNotice("info", "Archived “" + (item.title || "New chat") + "”. Find it under Archived conversations.", [
    { label: "Undo", onClick: () => restore(item, true, reopen) },
  ], "archived");
}

/** On a new chat's page: the Undo of the conversation archived while it was open. */
export function noticeArchivedOpen() {
  let item = null;
  try {
    item = JSON.parse(sessionStorage.getItem(ARCHIVED_OPEN_KEY) || "null");
    sessionStorage.removeItem(ARCHIVED_OPEN_KEY);
  } catch (_) {
    item = null;
  }
  if (item && typeof item.id === "string" && !state.sessionId) archivedNotice(item, true);
}

async function restore(item, undo, reopen = false) {
  try {
    await postJSON(urlFor("restore", item.id), {});
  } catch (error) {
    showNotice("error", "Could not restore: " + error.message);
    return;
  }
  if (item.id === state.sessionId || reopen) {
    location.assign(urlFor("conversation", item.id)); // back to a live, writable page
    return;
  }
  clearNotice("archived");
  if (undo) {
    await loadSessions();
  } else {
    state.sessions = state.sessions.filter((s) => s.id !== item.id);
    renderSidebar();
    showNotice("info", "Restored “" + (item.title || "New chat") + "”.", [], "archived");
  }
}

/** Ask in a modal dialog, then delete for good. */
function deleteForGood(item) {
  const dialog = $("confirm-delete");
  $("confirm-delete-name").textContent = "“" + (item.title || "New chat") + "”";
  const ok = $("confirm-ok");
  const cancel = $("confirm-cancel");
  const close = () => {
    ok.onclick = null;
    cancel.onclick = null;
    if (dialog.open) dialog.close();
  };
  cancel.onclick = close;
  ok.onclick = async () => {
    ok.disabled = true;
    try {
      await postJSON(urlFor("delete", item.id), {});
    } catch (error) {
      close();
      showNotice("error", "Could not delete: " + error.message);
      return;
    } finally {
      ok.disabled = false;
    }
    close();
    if (item.id === state.sessionId) {
      location.assign(data.urls.index);
      return;
    }
    state.sessions = state.sessions.filter((s) => s.id !== item.id);
    renderSidebar();
    showNotice("info", "Deleted “" + (item.title || "New chat") + "” for good.", [], "archived");
  };
  dialog.showModal();
}

/** Fill the sidebar from the server: live or archived sessions, searched or not. */
async function loadSessions() {
  const query = els.search.value.trim();
  const seq = ++searchSeq;
  const params = new URLSearchParams();
  if (query) params.set("q", query);
  if (state.archivedView) params.set("archived", "1");
  const result = await request(data.urls.sessions + "?" + params.toString(), { headers: { Accept: "application/json" } });
  if (seq !== searchSeq) return; // a later request is on its way
  state.query = query;
  state.sessions = result.sessions;
  renderSidebar();
}

export async function showArchived(on, focus = true) {
  state.archivedView = on;
  els.body.classList.toggle("archived-view", on);
  $("archive-head").hidden = !on;
  $("archive-toggle").hidden = on;
  $("archive-toggle").setAttribute("aria-pressed", String(on));
  els.search.placeholder = on ? "Search archived chats" : "Search chats";
  try {
    await loadSessions();
  } catch (error) {
    showNotice("error", "Could not load the conversations: " + error.message);
  }
  if (focus) $(on ? "archive-back" : "archive-toggle").focus();
}

let searchTimer = 0;
let searchSeq = 0;
async function search() {
  try {
    await loadSessions();
  } catch (error) {
    showNotice("error", "Search failed: " + error.message);
  }
}

/** The sidebar's events: the archive, the drawer on a phone, search, the tenant switcher; on
 * an archived conversation's page, its Restore and Delete buttons. */
export function wireSidebar() {
  $("archive-toggle").addEventListener("click", () => showArchived(true));
  $("archive-back").addEventListener("click", () => showArchived(false));
  if (state.readOnly) {
    const current = { id: data.session.id, title: data.session.title };
    $("restore-btn").addEventListener("click", () => restore(current));
    $("delete-btn").addEventListener("click", () => deleteForGood(current));
  }
  $("menu-btn").addEventListener("click", () => els.body.classList.add("sidebar-open"));
  $("sidebar-close").addEventListener("click", () => els.body.classList.remove("sidebar-open"));
  $("backdrop").addEventListener("click", () => els.body.classList.remove("sidebar-open"));
  els.search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(search, 220);
  });
  els.search.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && els.search.value) {
      els.search.value = "";
      search();
    }
  });
  const tenantSelect = $("tenant-select");
  if (tenantSelect) tenantSelect.addEventListener("change", () => $("tenant-switch").submit());
}
