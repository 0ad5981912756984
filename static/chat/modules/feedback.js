/* Feedback on a reply (docs/ui.md, "Feedback"): thumbs up and down under each finished reply,
 * one rating per person per version, pressed when given; pressing it again takes it back,
 * the other one changes it. A thumbs down asks what was wrong (a reason, a few words; both
 * optional). */

import { div, iconButton, textButton } from "./dom.js";
import { postJSON } from "./http.js";
import { refreshActions } from "./messages.js";
import { announce, showNotice } from "./notices.js";
import { data } from "./page.js";

const REASONS = [
  ["wrong", "Wrong"],
  ["outdated", "Outdated"],
  ["not_helpful", "Not helpful"],
  ["other", "Other"],
];
const COMMENT_CHARS = 500;
const url = (id) => data.urls.feedback + id + "/feedback";
let formSeq = 0;

/** Whether a reply can be rated: finished, with text, in a conversation that is not
 * read-only. */
export function ratable(m) {
  return m.role === "assistant" && typeof m.id === "number" && m.status !== "streaming" && !!m.content;
}

/** The buttons under a reply: 👍, 👎, and with a thumbs down, what was wrong. */
export function feedbackButtons(el) {
  const given = el._message.feedback || null;
  const up = iconButton("up", "Good reply", () => rate(el, "up"), "feedback-up");
  const down = iconButton("down", "Bad reply", () => rate(el, "down"), "feedback-down");
  up.setAttribute("aria-pressed", String(!!given && given.rating === "up"));
  down.setAttribute("aria-pressed", String(!!given && given.rating === "down"));
  const buttons = [up, down];
  if (given && given.rating === "down") {
    const label = REASONS.find(([code]) => code === given.reason);
    const why = textButton(label ? "Reason: " + label[1] : "Say what was wrong", () => openForm(el), "link-btn feedback-why");
    buttons.push(why);
  }
  return buttons;
}

async function save(el, body) {
  const m = el._message;
  try {
    const answer = await postJSON(url(m.id), body);
    m.feedback = answer.feedback;
  } catch (error) {
    showNotice("error", "Could not save your feedback: " + error.message);
    return false;
  }
  refreshActions();
  return true;
}

async function rate(el, rating) {
  const given = el._message.feedback;
  const again = !!given && given.rating === rating;
  closeForm(el);
  if (!(await save(el, { rating: again ? null : rating }))) return;
  if (again) {
    announce("Your rating of this reply is removed.");
    focusButton(el, rating);
  } else if (rating === "up") {
    announce("Thanks: rated a good reply.");
    focusButton(el, rating);
  } else {
    openForm(el);
  }
}

function focusButton(el, rating) {
  const button = el.querySelector(".feedback-" + rating);
  if (button) button.focus();
}

function closeForm(el) {
  const form = el.querySelector(".feedback-form");
  if (form) form.remove();
}

/** What was wrong: a reason and a few words, both optional; Send keeps them, Skip leaves the
 * thumbs down as it is. */
function openForm(el) {
  closeForm(el);
  const given = el._message.feedback || {};
  const id = "feedback-form-" + ++formSeq;
  const form = document.createElement("form");
  form.className = "feedback-form";
  form.setAttribute("aria-labelledby", id);
  const legend = document.createElement("p");
  legend.className = "feedback-legend";
  legend.id = id;
  legend.textContent = "What was wrong? (optional)";
  const reasons = div("feedback-reasons");
  reasons.setAttribute("role", "radiogroup");
  reasons.setAttribute("aria-labelledby", id);
  for (const [code, label] of REASONS) {
    const option = document.createElement("label");
    option.className = "feedback-reason";
    const input = document.createElement("input");
    input.type = "radio";
    input.name = id + "-reason";
    input.value = code;
    input.checked = given.reason === code;
    option.append(input, document.createTextNode(" " + label));
    reasons.append(option);
  }
  const comment = document.createElement("textarea");
  comment.className = "feedback-comment";
  comment.rows = 2;
  comment.maxLength = COMMENT_CHARS;
  comment.value = given.comment || "";
  comment.setAttribute("aria-label", "In your words (optional)");
  comment.placeholder = "In your words (optional)";
  // What the tenant's administrators learn from it (docs/privacy.md).
  const note = div("feedback-note", data.tenantName + "’s administrators see ratings and reasons; what you write here only under a content audit.");
  const buttons = div("editor-buttons");
  const skip = textButton("Skip", () => {
    closeForm(el);
    focusButton(el, "down");
    announce("Rated a bad reply.");
  });
  const send = textButton("Send", () => {}, "btn btn-primary");
  send.type = "submit";
  buttons.append(skip, send);
  form.append(legend, reasons, comment, note, buttons);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = form.querySelector("input[type=radio]:checked");
    const ok = await save(el, { rating: "down", reason: chosen ? chosen.value : "", comment: comment.value });
    if (!ok) return;
    closeForm(el);
    focusButton(el, "down");
    announce("Thanks: your feedback is saved.");
  });
  form.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.stopPropagation();
      skip.click();
    }
  });
  el.querySelector(".msg-body").append(form);
  const first = form.querySelector("input[type=radio]:checked") || form.querySelector("input[type=radio]");
  first.focus();
}
