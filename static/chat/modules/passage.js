/* The passage dialog: a source opened whole (GET /passages/<id>), with its document's title,
 * section or page, and a link to download the document. A modal <dialog>: labelled by its
 * title, Tab kept inside, Esc or Close shut it and give focus back to what opened it. */

import { request } from "./http.js";
import { $, data, els } from "./page.js";

let opener = null;
let seq = 0;

function dialog() {
  return $("passage-dialog");
}

/** Open `source` (an entry of a reply's sources) in the dialog; `from` gets focus back. */
export async function openPassage(source, from) {
  const box = dialog();
  opener = from || null;
  const mine = ++seq;
  $("passage-number").textContent = "Source " + source.number;
  $("passage-title").textContent = source.title;
  $("passage-where").textContent = source.where || "";
  $("passage-where").hidden = !source.where;
  $("passage-text").textContent = "Loading the passage…";
  $("passage-text").setAttribute("aria-busy", "true");
  $("passage-download").hidden = true;
  $("passage-origin").hidden = true;
  if (!box.open) box.showModal();
  $("passage-close").focus();
  let passage = null;
  try {
    passage = await request(data.urls.passage + source.passage_id, { headers: { Accept: "application/json" } });
  } catch (error) {
    if (mine !== seq) return;
    $("passage-text").textContent = "This passage cannot be opened: " + error.message;
    $("passage-text").removeAttribute("aria-busy");
    return;
  }
  if (mine !== seq) return; // another source was opened meanwhile
  $("passage-title").textContent = passage.title;
  $("passage-where").textContent = passage.where || "";
  $("passage-where").hidden = !passage.where;
  showText($("passage-text"), passage.text, source.quotes || []);
  $("passage-text").removeAttribute("aria-busy");
  const link = $("passage-download");
  link.href = passage.document.download_url;
  link.textContent = "Download " + passage.document.filename;
  link.hidden = false;
  showOrigin(passage.document);
}

/** Where a synced document lives: its page on the intranet (a link, opened in a new tab), or
 * its file's path in the share (text to copy: browsers do not open file paths). */
function showOrigin(doc) {
  const link = $("passage-origin-link");
  const path = $("passage-origin-path");
  link.hidden = !doc.origin_url;
  path.hidden = Boolean(doc.origin_url) || !doc.origin;
  if (doc.origin_url) {
    link.href = doc.origin_url;
    link.textContent = doc.origin_url;
  } else {
    path.textContent = doc.origin || "";
  }
  $("passage-origin").hidden = !doc.origin;
}

/** The passage's text with the sentences the reply rests on highlighted (<mark>), the first one
 * scrolled into view. Offsets come from the server; a quote that is not where they say (the
 * passage changed since) is looked up by its text. */
function showText(box, text, quotes) {
  const ranges = [];
  for (const quote of quotes) {
    let start = quote.start;
    if (text.slice(start, quote.end) !== quote.text) start = text.indexOf(quote.text);
    if (start >= 0 && quote.text) ranges.push([start, start + quote.text.length]);
  }
  ranges.sort((a, b) => a[0] - b[0]);
  const parts = [];
  let at = 0;
  for (const [start, end] of ranges) {
    if (start < at) continue;
    parts.push(text.slice(at, start));
    const mark = document.createElement("mark");
    mark.className = "quote";
    mark.textContent = text.slice(start, end);
    parts.push(mark);
    at = end;
  }
  parts.push(text.slice(at));
  box.replaceChildren(...parts);
  box.scrollTop = 0;
  const first = box.querySelector("mark");
  if (first) first.scrollIntoView({ block: "center" });
}

function focusables(box) {
  return Array.from(box.querySelectorAll("a[href]:not([hidden]), button:not([disabled]), [tabindex='0']"))
    .filter((el) => el.getClientRects().length > 0);
}

/** Tab and Shift+Tab go round the dialog's own controls. */
function trapFocus(event) {
  if (event.key !== "Tab") return;
  const items = focusables(dialog());
  if (!items.length) return;
  const first = items[0];
  const last = items[items.length - 1];
  if (event.shiftKey && document.activeElement === first) {
    event.preventDefault();
    last.focus();
  } else if (!event.shiftKey && document.activeElement === last) {
    event.preventDefault();
    first.focus();
  }
}

export function wirePassageDialog() {
  const box = dialog();
  box.addEventListener("keydown", trapFocus);
  $("passage-close").addEventListener("click", () => box.close());
  // A click on the backdrop (the dialog element itself, outside its content) closes it too.
  box.addEventListener("click", (event) => {
    if (event.target === box) box.close();
  });
  box.addEventListener("close", () => {
    seq += 1;
    const back = opener && opener.isConnected ? opener : els.input;
    opener = null;
    if (back) back.focus();
  });
}
