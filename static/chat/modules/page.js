/* The page itself: its data (the json_script block #chat-data, no inline script), the elements
 * every module reaches for, and the state they share. */

export const data = JSON.parse(document.getElementById("chat-data").textContent);
export const md = window.QassistMarkdown;
export const $ = (id) => document.getElementById(id);
export const els = {
  body: document.body,
  thread: $("thread"),
  messages: $("messages"),
  empty: $("empty-state"),
  input: $("input"),
  composer: $("composer"),
  send: $("send-btn"),
  stop: $("stop-btn"),
  notice: $("notice"),
  conn: $("conn-state"),
  title: $("conv-title"),
  list: $("session-items"),
  listEmpty: $("session-empty"),
  search: $("session-search"),
  announcer: $("announcer"),
  room: $("room"),
  roomText: $("room-text"),
};
export const csrfToken = document.querySelector("input[name=csrfmiddlewaretoken]").value;
export const urlFor = (name, id) => data.urls[name].replace(data.placeholderId, id);
export const isPhone = () => window.matchMedia("(max-width: 768px)").matches;
// A touch keyboard has no Shift+Enter to speak of: there, Enter is a new line and the send
// button sends. A touch screen with a mouse or trackpad too keeps the desktop keys.
export const touchTyping = () => window.matchMedia("(pointer: coarse) and (hover: none)").matches;

export const state = {
  sessionId: data.session ? data.session.id : null,
  ws: null,
  connected: false,
  attempts: 0,
  reconnectTimer: 0,
  busy: false, // a frame is out and its reply has not ended
  pending: null, // what was asked before reply.start: {kind, content, el, original}
  reply: null, // the reply streaming now: {id, el, text, frame, queued}
  lostDuringReply: false,
  noticeTag: "",
  noticeTimer: 0,
  sessions: [],
  query: "",
  room: null, // the last measure of the composer's text: {content, tokens, token_limit, fits, ...}
  archivedView: false, // the sidebar lists archived conversations
  readOnly: !!(data.session && data.session.archived), // this page shows an archived one
  startingChat: false, // a file dropped on a new chat is starting its conversation
};
