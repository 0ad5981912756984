/* The websocket: connecting, reconnecting with backoff, and redrawing from the stored
 * conversation when the live stream cannot be followed. */

import { autosize, restorePending, updateComposer } from "./composer.js";
import { refreshActions, renderThread, setTitle } from "./messages.js";
import { clearNotice, noticeCountdown, showNotice } from "./notices.js";
import { data, els, state, urlFor } from "./page.js";
import { handleFrame, subscribe } from "./replies.js";

// The frames that start a reply carry the model picked for it (issue #36), where the tenant
// offers more than one; the conversation remembers the pick.
const MODEL_FRAMES = new Set(["chat.send", "chat.regenerate", "chat.edit"]);

export function sendFrame(frame) {
  const picker = document.getElementById("model-select");
  if (picker && MODEL_FRAMES.has(frame.type)) frame = { ...frame, model: picker.value };
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) {
    showNotice("warn", "Not connected right now. Your text is kept; send it once the connection is back.", [], "offline-send");
    return false;
  }
  state.ws.send(JSON.stringify(frame));
  return true;
}

// --- the connection ------------------------------------------------------------------------

function setConn(kind) {
  const labels = { connecting: "Connecting…", online: "", offline: "Reconnecting…" };
  els.conn.className = "conn-state " + kind;
  els.conn.textContent = labels[kind];
  els.conn.hidden = kind === "online";
}

export function connect() {
  clearTimeout(state.reconnectTimer);
  if (state.ws) return;
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + "/ws/chat/");
  state.ws = ws;
  if (!state.attempts) setConn("connecting");
  ws.addEventListener("open", () => {
    if (state.ws !== ws) return;
    state.connected = true;
    state.attempts = 0;
    setConn("online");
    clearNotice("connection");
    clearNotice("offline-send");
    if (state.sessionId) {
      subscribe(); // see the conversation's reply, if one is being written, whole and live
    } else if (state.lostDuringReply) {
      state.lostDuringReply = false;
      resync(0);
    }
    updateComposer();
    refreshActions();
  });
  ws.addEventListener("message", (event) => {
    let frame = null;
    try {
      frame = JSON.parse(event.data);
    } catch (_) {
      return;
    }
    handleFrame(frame);
  });
  ws.addEventListener("close", (event) => onClose(ws, event));
}

function onClose(ws, event) {
  if (state.ws !== ws) return;
  state.ws = null;
  state.connected = false;
  if (event.code === 4401) {
    location.assign(data.urls.login + "?next=" + encodeURIComponent(location.pathname));
    return;
  }
  if (event.code === 4403) {
    setConn("offline");
    showNotice("error", "Your account is no longer in an active workspace. Ask an administrator, then reload the page.", [{ label: "Reload", onClick: () => location.reload() }], "connection");
    return;
  }
  if (state.busy) {
    // The reply goes on without us on the server; once back, the page resubscribes and
    // gets the rest of it (or, had it ended meanwhile, the stored result).
    state.lostDuringReply = true;
    if (!state.reply) state.busy = false;
  }
  updateComposer();
  refreshActions();
  scheduleReconnect();
}

function scheduleReconnect() {
  const delay = Math.min(15000, 500 * 2 ** state.attempts) * (0.8 + Math.random() * 0.4);
  state.attempts += 1;
  setConn("offline");
  const text = "Connection lost.";
  showNotice("warn", text, [{ label: "Reconnect now", onClick: connect }], "connection");
  noticeCountdown(delay / 1000, (left) => text + " Reconnecting in " + left + " s…", () => {
    els.notice.querySelector(".notice-text").textContent = text + " Reconnecting…";
  });
  state.noticeTag = "connection";
  state.reconnectTimer = setTimeout(connect, delay);
}

/** Redraw the conversation from what the server stored (after a dropped connection, or
 * when a reply's run does not answer). `once`: no polling. */
export async function resync(attempt, once) {
  const pending = state.pending;
  state.pending = null;
  if (!state.sessionId) {
    state.pending = pending;
    restorePending();
    return;
  }
  let body = null;
  try {
    const response = await fetch(urlFor("messages", state.sessionId), { headers: { Accept: "application/json" } });
    if (response.status === 401) {
      location.assign(data.urls.login + "?next=" + encodeURIComponent(location.pathname));
      return;
    }
    if (!response.ok) throw new Error(String(response.status));
    body = await response.json();
  } catch (_) {
    if (attempt < 5) setTimeout(() => resync(attempt + 1), 2000);
    return;
  }
  if (state.busy && !once) return; // a reply is live: its frames redraw the thread
  renderThread(body.messages);
  setTitle(body.session.title);
  if (pending && pending.kind === "send" && !body.messages.some((m) => m.role === "user" && m.content === pending.content) && !els.input.value.trim()) {
    els.input.value = pending.content;
    autosize();
  }
  if (!once && body.messages.some((m) => m.status === "streaming") && attempt < 200) {
    setTimeout(() => resync(attempt + 1), 1500);
  }
}
