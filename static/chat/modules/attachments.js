/* Files attached to a conversation (company knowledge): the paperclip and drag and drop (several
 * files at once), each file's status until it is ready (uploading, queued, indexing with its
 * percentage, ready, or failed with the reason), polled from GET /sessions/<id>/documents, and
 * the list above the composer with a remove button. On a new chat the first file starts the
 * conversation (POST /documents) and the page moves to it. */

import { updateComposer } from "./composer.js";
import { div, iconButton } from "./dom.js";
import { request } from "./http.js";
import { announce, showNotice } from "./notices.js";
import { $, csrfToken, data, state, urlFor } from "./page.js";

const POLL_MS = 1000;
const ACCEPT = ".pdf,.docx,.md,.markdown,.html,.htm,.txt,.text";
const items = []; // {key, file?, doc?, status, progress, error}
let queue = Promise.resolve();
let pollTimer = 0;
let keySeq = 0;
let onSessionStarted = null;

const STATUS = {
  waiting: () => "Waiting to upload",
  uploading: () => "Uploading…",
  queued: () => "Queued for reading",
  indexing: (item) => "Reading " + (item.progress || 0) + "%",
  ready: () => "Ready",
  failed: (item) => "Failed: " + (item.error || "the file could not be read."),
};

const fmtSize = (bytes) => (bytes < 1048576 ? Math.max(1, Math.round(bytes / 1024)) + " KB" : (bytes / 1048576).toFixed(1) + " MB");

function canAttach() {
  return !!(data.knowledge && data.knowledge.on) && !state.readOnly;
}

function fromServer(doc) {
  return { key: doc.id, doc, status: doc.status, progress: doc.progress, error: doc.error };
}

function itemEl(item) {
  const li = document.createElement("li");
  li.className = "attachment " + item.status;
  li.dataset.key = item.key;
  const name = item.doc ? item.doc.filename : item.file.name;
  const title = div("attachment-name", name);
  title.title = name;
  const status = div("attachment-status", STATUS[item.status](item));
  li.append(title, status);
  if (item.status === "indexing" || item.status === "queued" || item.status === "uploading") {
    const bar = document.createElement("progress");
    bar.max = 100;
    if (item.status === "indexing") bar.value = item.progress || 0;
    bar.setAttribute("aria-label", "Reading " + name);
    li.append(bar);
  }
  if (!state.readOnly && item.status !== "uploading" && item.status !== "waiting") {
    const gone = item.doc ? "Remove " + name : "Dismiss " + name;
    li.append(iconButton("close", gone, () => removeItem(item), "attachment-remove"));
  }
  return li;
}

export function renderAttachments() {
  const list = $("attachments");
  list.replaceChildren(...items.map(itemEl));
  list.hidden = items.length === 0;
}

async function removeItem(item) {
  if (item.doc) {
    try {
      await request(item.doc.url, { method: "DELETE", headers: { Accept: "application/json", "X-CSRFToken": csrfToken } });
    } catch (error) {
      showNotice("error", "Could not remove " + item.doc.filename + ": " + error.message);
      return;
    }
    announce("Removed " + item.doc.filename + " from this conversation.");
  }
  items.splice(items.indexOf(item), 1);
  renderAttachments();
  const focus = $("attach-btn");
  if (focus && !focus.hidden) focus.focus();
}

/** Send one file: to the conversation, or (a new chat) to a new conversation it starts. */
async function upload(item) {
  item.status = "uploading";
  renderAttachments();
  const form = new FormData();
  form.append("file", item.file);
  const url = state.sessionId ? urlFor("documents", state.sessionId) : data.urls.attachNew;
  const starting = !state.sessionId;
  if (starting) {
    state.startingChat = true;
    updateComposer();
  }
  let body = null;
  try {
    body = await request(url, { method: "POST", body: form, headers: { Accept: "application/json", "X-CSRFToken": csrfToken } });
  } catch (error) {
    item.status = "failed";
    item.error = error.message;
    renderAttachments();
    announce(item.file.name + " was not attached: " + error.message);
    return;
  } finally {
    if (starting) {
      state.startingChat = false;
      updateComposer();
    }
  }
  if (body.session && onSessionStarted) onSessionStarted(body.session);
  Object.assign(item, fromServer(body.document), { key: item.key });
  renderAttachments();
  schedulePoll();
}

/** Attach `files` (a FileList or array), one after the other. */
export function attachFiles(files) {
  if (!canAttach()) return;
  for (const file of Array.from(files)) {
    const item = { key: "local-" + ++keySeq, file, status: "waiting", progress: 0, error: "" };
    if (data.maxFileBytes && file.size > data.maxFileBytes) {
      item.status = "failed";
      item.error = "The file is " + fmtSize(file.size) + "; one file may be at most " + fmtSize(data.maxFileBytes) + ".";
    } else {
      queue = queue.then(() => upload(item));
    }
    items.push(item);
  }
  renderAttachments();
}

function schedulePoll() {
  clearTimeout(pollTimer);
  if (state.sessionId && items.some((i) => i.doc && (i.status === "queued" || i.status === "indexing"))) {
    pollTimer = setTimeout(poll, POLL_MS);
  }
}

async function poll() {
  let body = null;
  try {
    body = await request(urlFor("documents", state.sessionId), { headers: { Accept: "application/json" } });
  } catch (_) {
    pollTimer = setTimeout(poll, POLL_MS * 3); // a blip: the files are still being read
    return;
  }
  const byId = new Map(body.documents.map((d) => [d.id, d]));
  for (const item of items) {
    if (!item.doc) continue;
    const doc = byId.get(item.doc.id);
    if (!doc) continue;
    const before = item.status;
    Object.assign(item, fromServer(doc), { key: item.key });
    if (before !== item.status && item.status === "ready") announce(doc.filename + " is ready: ask about it.");
    if (before !== item.status && item.status === "failed") announce(doc.filename + " could not be read: " + doc.error);
  }
  renderAttachments();
  schedulePoll();
}

function wireDropZone() {
  const zone = $("drop-zone");
  const area = document.querySelector(".main");
  let depth = 0;
  const hasFiles = (event) => Array.from(event.dataTransfer ? event.dataTransfer.types : []).includes("Files");
  area.addEventListener("dragenter", (event) => {
    if (!hasFiles(event)) return;
    event.preventDefault();
    depth += 1;
    zone.hidden = false;
  });
  area.addEventListener("dragover", (event) => {
    if (!hasFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
  });
  area.addEventListener("dragleave", () => {
    depth = Math.max(0, depth - 1);
    if (!depth) zone.hidden = true;
  });
  area.addEventListener("drop", (event) => {
    if (!hasFiles(event)) return;
    event.preventDefault();
    depth = 0;
    zone.hidden = true;
    attachFiles(event.dataTransfer.files);
  });
}

/** `started(session)` is called when a file starts a new conversation. */
export function wireAttachments(started) {
  onSessionStarted = started;
  for (const doc of data.attachments || []) items.push(fromServer(doc));
  renderAttachments();
  schedulePoll();
  const button = $("attach-btn");
  const input = $("attach-input");
  if (!canAttach() || !button) {
    if (button) button.hidden = true;
    return;
  }
  input.accept = ACCEPT;
  button.addEventListener("click", () => input.click());
  input.addEventListener("change", () => {
    attachFiles(input.files);
    input.value = "";
  });
  wireDropZone();
}
