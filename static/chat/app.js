/* The chat page: the conversation, the websocket (docs/websocket.md), the sidebar.
 *
 * Model output goes through QassistMarkdown.render (sanitised); user text is only ever set as
 * textContent. Page data arrives in the json_script block #chat-data; no inline script.
 */
(function () {
  "use strict";

  document.documentElement.classList.add("js");
  const data = JSON.parse(document.getElementById("chat-data").textContent);
  const md = window.QassistMarkdown;
  const $ = (id) => document.getElementById(id);
  const els = {
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
  const csrfToken = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  const urlFor = (name, id) => data.urls[name].replace(data.placeholderId, id);
  const isPhone = () => window.matchMedia("(max-width: 768px)").matches;
  // A touch keyboard has no Shift+Enter to speak of: there, Enter is a new line and the send
  // button sends. A touch screen with a mouse or trackpad too keeps the desktop keys.
  const touchTyping = () => window.matchMedia("(pointer: coarse) and (hover: none)").matches;

  const state = {
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
  };

  // --- small DOM helpers -------------------------------------------------------------------

  function div(className, text) {
    const el = document.createElement("div");
    el.className = className;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  const ICONS = {
    copy: md.COPY_ICON,
    edit: '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path d="M4 20h4L19 9l-4-4L4 16v4z"/><path d="M13.5 6.5l4 4"/></svg>',
    regenerate: '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path d="M20 11a8 8 0 1 0-2.3 5.7"/><path d="M20 4v7h-7"/></svg>',
    rename: '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path d="M4 20h4L19 9l-4-4L4 16v4z"/></svg>',
    archive: '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><rect x="3" y="4" width="18" height="5" rx="1"/><path d="M5 9v10h14V9M10 13h4"/></svg>',
    restore: '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path d="M4 12a8 8 0 1 0 2.3-5.7"/><path d="M4 4v5h5"/></svg>',
    trash: '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path d="M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13"/></svg>',
    close: '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round"><path d="M6 6l12 12M18 6L6 18"/></svg>',
  };

  function iconButton(icon, label, onClick, extraClass) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "icon-btn" + (extraClass ? " " + extraClass : "");
    button.setAttribute("aria-label", label);
    button.title = label;
    button.innerHTML = ICONS[icon]; // constant markup, never data
    button.addEventListener("click", onClick);
    return button;
  }

  function textButton(label, onClick, className) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = className || "btn";
    button.textContent = label;
    button.addEventListener("click", onClick);
    return button;
  }

  // --- the live region: what a screen reader hears without moving ---------------------------

  const ANNOUNCE_CHARS = 1500;

  /** Say `text` once, politely (after what the reader is saying now). */
  function announce(text) {
    els.announcer.textContent = text;
  }

  function announceReply(el, m) {
    if (m.status === "error") return; // the notice (role=alert) says what went wrong
    let text = el.querySelector(".md").textContent.trim().replace(/\s+/g, " ");
    if (text.length > ANNOUNCE_CHARS) text = text.slice(0, ANNOUNCE_CHARS) + "… (continues in the conversation)";
    const ending = INTERRUPTED[m.finish_reason] && m.status === "interrupted" ? " (" + INTERRUPTED[m.finish_reason][0] + ")" : "";
    announce("qassist said: " + (text || "nothing") + ending);
  }

  // --- notices: one line above the composer ------------------------------------------------

  function clearNotice(tag) {
    if (tag && state.noticeTag !== tag) return;
    clearInterval(state.noticeTimer);
    state.noticeTimer = 0;
    state.noticeTag = "";
    els.notice.hidden = true;
    els.notice.replaceChildren();
  }

  /** kind: info | warn | error. actions: [{label, onClick, primary}]. */
  function showNotice(kind, text, actions, tag) {
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
  function noticeCountdown(seconds, text, done) {
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

  // --- messages ------------------------------------------------------------------------------

  let labelSeq = 0;

  function messageEl(m, live) {
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
      body.append(div("md"), div("msg-status"));
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

  function badge(kind, text, title) {
    const el = document.createElement("span");
    el.className = "badge badge-" + kind;
    el.textContent = text;
    if (title) el.title = title;
    return el;
  }

  function updateAssistant(el, m, live) {
    el._message = m;
    const streaming = m.status === "streaming";
    el.classList.toggle("streaming", streaming && live);
    const body = el.querySelector(".md");
    if (m.content) {
      md.render(body, m.content, !streaming);
    } else if (streaming && live) {
      body.replaceChildren(waitingEl(null));
    } else {
      body.replaceChildren();
    }
    const status = el.querySelector(".msg-status");
    const parts = [];
    if (m.served_from_cache) {
      parts.push(badge("cached", "cached answer", "A prepared answer from your administrators; the model was not asked."));
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
  }

  function waitingEl(position) {
    const el = div("waiting");
    const dots = div("dots");
    dots.append(document.createElement("span"), document.createElement("span"), document.createElement("span"));
    el.append(dots);
    if (position) el.append(document.createTextNode("Waiting in line — you are number " + position));
    return el;
  }

  function findMsg(id) {
    return els.messages.querySelector('.msg[data-id="' + CSS.escape(String(id)) + '"]');
  }

  function renderThread(messages) {
    els.messages.replaceChildren(...messages.map((m) => messageEl(m, false)));
    els.empty.hidden = messages.length > 0 || !!state.sessionId;
    refreshActions();
  }

  function refreshActions() {
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
      if (el === lastUser && canAct) buttons.push(iconButton("edit", "Edit and resend", () => startEdit(el)));
      if (el === lastAssistant && canAct && el === all[all.length - 1]) {
        buttons.push(iconButton("regenerate", "Regenerate", regenerate, "regenerate"));
      }
      actions.replaceChildren(...buttons);
    });
  }

  /** "‹ 2 / 3 ›": flip between the versions of a regenerated reply or an edited message. */
  function versionSwitcher(el, m, enabled) {
    const index = m.versions.indexOf(m.id);
    const box = document.createElement("span");
    box.className = "versions";
    const step = (delta, label, glyph) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "icon-btn version-" + (delta < 0 ? "prev" : "next");
      button.setAttribute("aria-label", label);
      button.title = label;
      button.textContent = glyph;
      const target = m.versions[index + delta];
      button.disabled = !enabled || target === undefined;
      button.addEventListener("click", () => switchVersion(el, target, button.classList[1]));
      return button;
    };
    const count = document.createElement("span");
    count.className = "version-count";
    count.setAttribute("aria-hidden", "true");
    count.textContent = index + 1 + " / " + m.versions.length;
    const spoken = document.createElement("span");
    spoken.className = "visually-hidden";
    spoken.textContent = "Version " + (index + 1) + " of " + m.versions.length;
    box.append(step(-1, "Previous version", "‹"), count, spoken, step(1, "Next version", "›"));
    return box;
  }

  async function switchVersion(el, targetId, buttonClass) {
    if (state.busy || !state.sessionId || targetId === undefined) return;
    const position = Array.from(els.messages.children).indexOf(el);
    let body = null;
    try {
      body = await postJSON(urlFor("branch", state.sessionId), { message: targetId });
    } catch (error) {
      showNotice("error", "Could not show that version: " + error.message);
      return;
    }
    if (state.busy) return; // a reply started meanwhile: its frames redraw the thread
    renderThread(body.messages);
    const same = els.messages.children[position];
    const button = same && (same.querySelector("." + buttonClass + ":not(:disabled)") || same.querySelector(".versions button:not(:disabled)"));
    if (button) button.focus();
    announce("Showing version " + (body.messages[position].versions.indexOf(body.messages[position].id) + 1) + " of " + body.messages[position].versions.length);
  }

  // --- scrolling ---------------------------------------------------------------------------

  function nearBottom() {
    const t = els.thread;
    return t.scrollHeight - t.scrollTop - t.clientHeight < 120;
  }

  function scrollToBottom() {
    els.thread.scrollTop = els.thread.scrollHeight;
  }

  // --- the composer --------------------------------------------------------------------------

  function autosize() {
    els.input.style.height = "auto";
    els.input.style.height = Math.min(els.input.scrollHeight, 220) + "px";
  }

  function updateComposer() {
    const streaming = !!state.reply;
    els.stop.hidden = !streaming;
    els.stop.disabled = false;
    els.send.hidden = streaming;
    const tooLong = !!(state.room && state.room.content === els.input.value && !state.room.fits);
    els.send.disabled = state.busy || !state.connected || !els.input.value.trim() || tooLong;
  }

  // --- room left: the counter under the composer --------------------------------------------

  const ROOM_SHOW_SHARE = 0.5; // the counter appears once half the model's window is used
  const ROOM_SHOW_CHARS = 4000; // ... or for a long message, whatever the window
  const DRAFT_KEY = "qassist.draft"; // a message carried over to a new conversation
  let measureTimer = 0;
  let measureSeq = 0;
  const fmt = (n) => Number(n).toLocaleString("en-US");

  /** Measure what the composer holds against the model's window, shortly after typing stops. */
  function scheduleMeasure(now) {
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

  function tooLongText(r) {
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

  function renderRoom() {
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
      els.roomText.textContent = fmt(r.tokens) + " of " + fmt(r.token_limit) + " tokens used, the conversation so far included";
    }
    updateComposer();
  }

  /** The way out when the history is what makes a message too long: a new conversation,
   * the message waiting in its composer. */
  function startNewWithDraft() {
    try {
      sessionStorage.setItem(DRAFT_KEY, els.input.value);
    } catch (_) {
      /* private mode: the text is not carried over */
    }
    location.assign(data.urls.index);
  }

  function setTitle(title) {
    els.title.textContent = title || "New chat";
    document.title = (title ? title + " · " : "") + "qassist";
  }

  let composing = false;

  /** Enter sends; Shift+Enter is a new line; Enter that confirms an IME's choice is not a send.
   * On a touch keyboard Enter is always a new line. */
  function isSendKey(event) {
    if (event.key !== "Enter" || event.shiftKey || touchTyping()) return false;
    // isComposing: Chrome, Firefox. keyCode 229: Safari sends compositionend before keydown.
    return !(event.isComposing || composing || event.keyCode === 229);
  }

  function sendFrame(frame) {
    if (!state.ws || state.ws.readyState !== WebSocket.OPEN) {
      showNotice("warn", "Not connected right now. Your text is kept; send it once the connection is back.", [], "offline-send");
      return false;
    }
    state.ws.send(JSON.stringify(frame));
    return true;
  }

  function submitComposer() {
    const content = els.input.value;
    if (!content.trim() || state.busy) return;
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

  function regenerate() {
    if (state.busy || !state.sessionId) return;
    if (!sendFrame({ type: "chat.regenerate", session: state.sessionId })) return;
    state.busy = true;
    const last = els.messages.lastElementChild;
    if (last && last.dataset.role === "assistant") last.classList.add("pending");
    state.pending = { kind: "regenerate", el: last };
    clearNotice();
    updateComposer();
    refreshActions();
  }

  function stop() {
    if (!state.reply) return;
    els.stop.disabled = true;
    sendFrame({ type: "chat.stop", session: state.sessionId });
  }

  function startEdit(el) {
    if (state.busy || el.querySelector(".editor")) return;
    const m = el._message;
    const bubble = el.querySelector(".bubble");
    const actions = el.querySelector(".msg-actions");
    const editor = div("editor");
    const area = document.createElement("textarea");
    area.value = m.content;
    area.setAttribute("aria-label", "Edit your message");
    const cancel = () => {
      editor.remove();
      bubble.hidden = false;
      actions.hidden = false;
    };
    const submit = () => {
      const content = area.value;
      if (!content.trim() || state.busy) return;
      if (!sendFrame({ type: "chat.edit", session: state.sessionId, content })) return;
      state.busy = true;
      state.pending = { kind: "edit", el, original: m.content };
      bubble.textContent = content;
      cancel();
      for (let next = el.nextElementSibling; next; next = next.nextElementSibling) next.classList.add("pending");
      clearNotice();
      updateComposer();
      refreshActions();
    };
    let editing = false;
    area.addEventListener("compositionstart", () => { editing = true; });
    area.addEventListener("compositionend", () => { editing = false; });
    area.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        cancel();
      } else if (event.key === "Enter" && !event.shiftKey && !touchTyping() && !event.isComposing && !editing && event.keyCode !== 229) {
        event.preventDefault();
        submit();
      }
    });
    const buttons = div("editor-buttons");
    buttons.append(textButton("Cancel", cancel), textButton("Send", submit, "btn btn-primary"));
    editor.append(area, buttons);
    bubble.hidden = true;
    actions.hidden = true;
    bubble.parentElement.prepend(editor);
    area.focus();
    area.setSelectionRange(area.value.length, area.value.length);
  }

  /** The frame was refused before a reply started: put things back as they were. */
  function restorePending() {
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

  // --- frames from the server ----------------------------------------------------------------

  function onReplyStart(f) {
    state.busy = true;
    if (state.sessionId !== f.session.id) {
      state.sessionId = f.session.id;
      history.replaceState(null, "", urlFor("conversation", f.session.id));
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
    const replyEl = messageEl(f.reply, true);
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
    if (!r.text) r.el.querySelector(".md").replaceChildren(waitingEl(f.position));
    showNotice("info", "Many people are asking right now. You are number " + f.position + " in line; your reply starts as soon as a slot frees up.", [], "queued");
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

  function subscribe() {
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
    if (live.text) md.render(live.el.querySelector(".md"), live.text, false);
    else live.el.querySelector(".md").replaceChildren(waitingEl(null));
    updateComposer();
    refreshActions();
  }

  function renderLive(r) {
    r.frame = 0;
    if (state.reply !== r) return;
    const stick = nearBottom();
    md.render(r.el.querySelector(".md"), r.text, false);
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

  const ERRORS = {
    busy: { kind: "warn", text: "The assistant is at capacity right now.", retry: true },
    rate_limited: { kind: "warn", text: "You are sending messages faster than your workspace allows.", retry: true },
    quota_exceeded: { kind: "error", text: "Your workspace has used its token quota for this period. It renews at the start of the next one; an administrator can raise it." },
    worker_down: { kind: "error", text: "The model is not answering right now. Try again in a minute; if it keeps happening, tell your administrator.", retry: true },
    shutting_down: { kind: "warn", text: "The assistant restarted before the reply was finished. The text so far is kept.", retry: true },
    prompt_too_long: { kind: "error", text: "This conversation is now too long for the model to read. Start a new conversation, or make your last message shorter.", newChat: true },
    busy_session: { kind: "warn", text: "A reply is still being written in this conversation (in another tab?). Wait for it, or stop it there." },
    busy_connection: { kind: "warn", text: "Wait for the reply, or stop it, before sending." },
    not_found: { kind: "error", text: "This conversation no longer exists.", newChat: true },
    internal: { kind: "error", text: "Something went wrong on our side. The text so far is kept.", retry: true },
  };
  ERRORS.quota_exhausted = ERRORS.quota_exceeded;

  function onError(f) {
    const spec = ERRORS[f.code] || { kind: "error", text: f.message || "Something went wrong." };
    const duringReply = f.reply_id !== undefined && f.reply_id !== null;
    if (f.code === "prompt_too_long" && !duringReply && state.pending && state.pending.kind === "send") {
      // Refused before anything was stored: the text goes back to the composer, whose counter
      // says why and offers the way out. One message, not two.
      restorePending();
      if (!state.reply) state.busy = false;
      state.room = { content: els.input.value, fits: false, fits_alone: !!state.sessionId, serverText: f.message };
      renderRoom();
      refreshActions();
      scheduleMeasure(true); // the counter's own numbers replace the server's words
      return;
    }
    if (!duringReply && state.pending) {
      restorePending();
      if (!state.reply) state.busy = false;
      updateComposer();
      refreshActions();
    }
    const text = spec.text || f.message;
    const actions = [];
    let retry = null;
    if (spec.retry) {
      // A failed reply is asked again (regenerate); a refused message is still in the composer.
      retry = { label: duringReply ? "Retry" : "Send again", onClick: () => (duringReply ? regenerate() : submitComposer()), primary: true };
      actions.push(retry);
    }
    if (spec.newChat) actions.push({ label: "Start a new conversation", onClick: () => location.assign(data.urls.index) });
    const shown = showNotice(spec.kind, text, actions, "error");
    if (retry && f.retry_after) {
      const button = shown.buttons[0];
      button.disabled = true;
      noticeCountdown(
        f.retry_after,
        (left) => text + " You can retry in " + left + " s.",
        () => {
          shown.span.textContent = text + " You can retry now.";
          button.disabled = false;
        },
      );
    }
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

  function handleFrame(f) {
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

  // --- the connection ------------------------------------------------------------------------

  function setConn(kind) {
    const labels = { connecting: "Connecting…", online: "", offline: "Reconnecting…" };
    els.conn.className = "conn-state " + kind;
    els.conn.textContent = labels[kind];
    els.conn.hidden = kind === "online";
  }

  function connect() {
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
  async function resync(attempt, once) {
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
    link.textContent = item.title || "New chat";
    link.title = item.title || "New chat";
    const actions = div("session-actions");
    const name = item.title || "New chat";
    if (state.archivedView) {
      actions.append(
        iconButton("restore", "Restore " + name, () => restore(item)),
        iconButton("trash", "Delete " + name + " for good", () => deleteForGood(item)),
      );
    } else {
      actions.append(
        iconButton("rename", "Rename " + name, () => startRename(li, item)),
        iconButton("archive", "Archive " + name, () => archive(item)),
      );
    }
    li.append(link, actions);
    return li;
  }

  function renderSidebar() {
    const nodes = [];
    let group = null;
    for (const item of state.sessions) {
      const label = state.query ? "Results" : groupLabel(item.updated_at);
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

  function upsertSession(item) {
    if (state.archivedView) return;
    state.sessions = [item, ...state.sessions.filter((s) => s.id !== item.id)];
    if (!state.query) renderSidebar();
  }

  async function request(url, options) {
    const response = await fetch(url, Object.assign({ credentials: "same-origin" }, options));
    let payload = null;
    try {
      payload = await response.json();
    } catch (_) {
      payload = null;
    }
    if (response.status === 401) {
      location.assign(data.urls.login + "?next=" + encodeURIComponent(location.pathname));
    }
    if (!response.ok) {
      const message = payload && payload.error ? payload.error.message : "The server answered " + response.status + ".";
      throw new Error(message);
    }
    return payload;
  }

  function postJSON(url, body) {
    return request(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken },
      body: JSON.stringify(body || {}),
    });
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

  /** Archive at once (it can be undone): a notice offers Undo; the current one reopens
   * read-only. */
  async function archive(item) {
    try {
      await postJSON(urlFor("archive", item.id), {});
    } catch (error) {
      showNotice("error", "Could not archive: " + error.message);
      return;
    }
    if (item.id === state.sessionId) {
      location.assign(urlFor("conversation", item.id));
      return;
    }
    state.sessions = state.sessions.filter((s) => s.id !== item.id);
    renderSidebar();
    showNotice("info", "Archived “" + (item.title || "New chat") + "”. Find it under Archived conversations.", [
      { label: "Undo", onClick: () => restore(item, true) },
    ], "archived");
  }

  async function restore(item, undo) {
    try {
      await postJSON(urlFor("restore", item.id), {});
    } catch (error) {
      showNotice("error", "Could not restore: " + error.message);
      return;
    }
    if (item.id === state.sessionId) {
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

  async function showArchived(on, focus = true) {
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

  // --- wiring --------------------------------------------------------------------------------

  function wire() {
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
    $("archive-toggle").addEventListener("click", () => showArchived(true));
    $("archive-back").addEventListener("click", () => showArchived(false));
    if (state.readOnly) {
      const current = { id: data.session.id, title: data.session.title };
      $("restore-btn").addEventListener("click", () => restore(current));
      $("delete-btn").addEventListener("click", () => deleteForGood(current));
    }
    $("skip-link").addEventListener("click", (event) => {
      event.preventDefault();
      (state.readOnly ? $("restore-btn") : els.input).focus();
    });
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
    autosize();
    updateComposer();
    scrollToBottom();
    connect();
    if (!isPhone()) els.input.focus();
  }

  init();
})();
