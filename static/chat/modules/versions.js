/* Versions and branches (docs/websocket.md): "‹ 2 / 3 ›" under a message, regenerate, edit
 * and resend (any question: the conversation goes on from the edited copy). */

import { updateComposer } from "./composer.js";
import { div, textButton } from "./dom.js";
import { postJSON } from "./http.js";
import { refreshActions, renderThread } from "./messages.js";
import { announce, clearNotice, showNotice } from "./notices.js";
import { els, state, touchTyping, urlFor } from "./page.js";
import { sendFrame } from "./socket.js";

/** "‹ 2 / 3 ›": flip between the versions of a regenerated reply or an edited message. */
export function versionSwitcher(el, m, enabled) {
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

export function regenerate() {
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

export function startEdit(el) {
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
    if (!sendFrame({ type: "chat.edit", session: state.sessionId, content, message: m.id })) return;
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
