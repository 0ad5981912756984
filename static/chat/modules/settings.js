/* Custom instructions (docs/ui.md, "Custom instructions"): the dialog that edits them. The
 * model reads them after the tenant's own instructions from the next message on; the token
 * counter under the message box counts them. */

import { postJSON } from "./http.js";
import { announce } from "./notices.js";
import { $, data } from "./page.js";
import { scheduleMeasure } from "./room.js";

const fmt = (n) => Number(n).toLocaleString("en-US");

function count() {
  const input = $("instructions-input");
  $("instructions-count").textContent = fmt(input.value.length) + " of " + fmt(data.maxInstructionsChars) + " characters";
}

export function wireSettings() {
  const dialog = $("instructions-dialog");
  const input = $("instructions-input");
  const error = $("instructions-error");
  const opener = $("instructions-btn");
  input.maxLength = data.maxInstructionsChars;
  opener.addEventListener("click", () => {
    input.value = data.instructions || "";
    error.hidden = true;
    count();
    dialog.showModal();
    input.focus();
  });
  input.addEventListener("input", count);
  $("instructions-cancel").addEventListener("click", () => dialog.close());
  $("instructions-save").addEventListener("click", async () => {
    const save = $("instructions-save");
    save.disabled = true;
    try {
      const answer = await postJSON(data.urls.instructions, { instructions: input.value });
      data.instructions = answer.instructions;
    } catch (failure) {
      error.textContent = "Not saved: " + failure.message;
      error.hidden = false;
      return;
    } finally {
      save.disabled = false;
    }
    dialog.close();
    announce(data.instructions ? "Custom instructions saved: they apply from your next message." : "Custom instructions removed.");
    scheduleMeasure(true); // the room they take changed
  });
  dialog.addEventListener("close", () => opener.focus());
}
