/* Error frames as people read them: a notice with what to do (retry, after a countdown, or a new
 * conversation). */

import { restorePending, submitComposer, updateComposer } from "./composer.js";
import { refreshActions } from "./messages.js";
import { noticeCountdown, showNotice } from "./notices.js";
import { data, els, state } from "./page.js";
import { renderRoom, scheduleMeasure } from "./room.js";
import { regenerate } from "./versions.js";

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

export function onError(f) {
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
