/* A reply's sources (company knowledge): the passages its question was given, listed under it
 * (number, document, section or page, the snippet on expand), the cited ones first and marked,
 * the rest dimmed or folded away; the [n] markers in the reply's text become buttons; a passage
 * opens whole in a dialog (passage.js). Everything from the server is set as textContent. */

import { div } from "./dom.js";
import { openPassage } from "./passage.js";

// The passage numbers a reply cites: [2], [1, 3], 【2】 (knowledge/prompt.py's cited_numbers).
const CITATION = /[[【]\s*(\d{1,3}(?:\s*[,，、]\s*\d{1,3})*)\s*[\]】]/g;
const SKIP = "pre, code, a, button";
let listSeq = 0;

export function citedNumbers(text) {
  const numbers = new Set();
  for (const match of (text || "").matchAll(CITATION)) {
    for (const n of match[1].split(/[,，、\s]+/)) if (n) numbers.add(Number(n));
  }
  return numbers;
}

function label(source) {
  return source.where ? source.title + ", " + source.where : source.title;
}

/** The sources of reply `m` under its element, `text` being what it says so far (a reply still
 * being written has no `cited` marks yet: they are read from its text as it comes). */
export function renderSources(el, m, text) {
  const box = el.querySelector(".sources");
  const sources = Array.isArray(m.sources) ? m.sources : [];
  if (!sources.length) {
    box.replaceChildren();
    box.hidden = true;
    delete box.dataset.key;
    return;
  }
  const inText = citedNumbers(text);
  const cited = (s) => !!s.cited || inText.has(s.number);
  const anyCited = sources.some(cited);
  // Redrawn only when what it shows changes (not at every piece of a streaming reply), keeping
  // what the reader opened.
  const key = sources
    .map((s) => s.number + (cited(s) ? "c" : "") + ":" + s.passage_id + ":" + (s.quotes || []).length)
    .join(",");
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  const wasOpen = box.querySelector(".sources-more[aria-expanded=true]") !== null;
  const opened = new Set(Array.from(box.querySelectorAll("details[open]"), (d) => d.closest(".source").dataset.number));
  const heading = document.createElement("h3");
  heading.className = "sources-head";
  heading.id = "sources-" + ++listSeq;
  heading.textContent = "Sources";
  const shown = document.createElement("ol");
  shown.className = "source-list";
  shown.setAttribute("aria-labelledby", heading.id);
  const folded = document.createElement("ol");
  folded.className = "source-list source-list-more";
  folded.setAttribute("aria-label", "Passages the reply was given but did not cite");
  folded.id = "sources-more-" + listSeq;
  for (const source of sources) {
    const item = sourceEl(source, cited(source));
    if (opened.has(String(source.number))) item.querySelector("details").open = true;
    (anyCited && !cited(source) ? folded : shown).append(item);
  }
  const parts = [heading, shown];
  if (folded.children.length) {
    const more = document.createElement("button");
    more.type = "button";
    more.className = "link-btn sources-more";
    more.setAttribute("aria-controls", folded.id);
    const count = folded.children.length;
    const setOpen = (open) => {
      more.setAttribute("aria-expanded", String(open));
      folded.hidden = !open;
      more.textContent = open ? "Hide the passages not cited" : count + " more passage" + (count > 1 ? "s" : "") + " given, not cited";
    };
    more.addEventListener("click", () => setOpen(more.getAttribute("aria-expanded") !== "true"));
    setOpen(wasOpen);
    parts.push(more, folded);
  }
  box.replaceChildren(...parts);
  box.hidden = false;
}

function sourceEl(source, cited) {
  const item = document.createElement("li");
  item.className = "source " + (cited ? "cited" : "uncited");
  item.dataset.number = String(source.number);
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  const number = document.createElement("span");
  number.className = "source-number";
  number.textContent = String(source.number);
  const title = document.createElement("span");
  title.className = "source-title";
  title.textContent = source.title;
  summary.append(number, title);
  if (source.where) {
    const where = document.createElement("span");
    where.className = "source-where";
    where.textContent = source.where;
    summary.append(where);
  }
  if (cited) summary.append(div("visually-hidden", "(cited)"));
  details.append(summary);
  const quotes = Array.isArray(source.quotes) ? source.quotes : [];
  if (source.passage_id === null || source.passage_id === undefined) {
    details.append(div("source-snippet removed", "This passage was removed from the documents since."));
  } else {
    details.append(div("source-snippet", source.snippet || ""));
    const open = document.createElement("button");
    open.type = "button";
    open.className = "btn btn-small source-open";
    open.textContent = "Open the passage";
    open.setAttribute("aria-haspopup", "dialog");
    open.addEventListener("click", () => openPassage(source, open));
    details.append(open);
  }
  item.append(details);
  // What the reply rests on, in the passage's own words: shown without opening anything, so a
  // figure can be checked against its sentence at a glance.
  for (const quote of quotes) {
    const block = document.createElement("blockquote");
    block.className = "source-quote";
    block.textContent = quote.text;
    if (source.passage_id !== null && source.passage_id !== undefined) {
      block.tabIndex = 0;
      block.title = "Open the passage with this sentence highlighted";
      block.setAttribute("role", "button");
      block.setAttribute("aria-label", "Quoted from source " + source.number + ": " + quote.text);
      block.addEventListener("click", () => openPassage(source, block));
      block.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          openPassage(source, block);
        }
      });
    }
    item.append(block);
  }
  return item;
}

/** The [n] markers of the reply's rendered text as buttons opening passage n (only numbers the
 * reply was given; the text itself is left as the model wrote it). */
export function linkCitations(root, sources) {
  const known = new Map((sources || []).filter((s) => s.passage_id != null).map((s) => [s.number, s]));
  if (!known.size) return;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (node.parentElement.closest(SKIP) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  const nodes = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    CITATION.lastIndex = 0;
    if (CITATION.test(node.nodeValue)) nodes.push(node);
  }
  for (const node of nodes) node.replaceWith(citationFragment(node.nodeValue, known));
}

function citationFragment(text, known) {
  const fragment = document.createDocumentFragment();
  let at = 0;
  for (const match of text.matchAll(CITATION)) {
    fragment.append(text.slice(at, match.index));
    // "[1, 3]": each number its own button, the brackets and commas kept as text.
    const inner = match[0];
    let from = 0;
    for (const number of inner.matchAll(/\d{1,3}/g)) {
      fragment.append(inner.slice(from, number.index));
      const source = known.get(Number(number[0]));
      fragment.append(source ? citeButton(number[0], source) : number[0]);
      from = number.index + number[0].length;
    }
    fragment.append(inner.slice(from));
    at = match.index + match[0].length;
  }
  fragment.append(text.slice(at));
  return fragment;
}

function citeButton(text, source) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "cite";
  button.textContent = text;
  button.setAttribute("aria-label", "Source " + source.number + ": " + label(source));
  button.setAttribute("aria-haspopup", "dialog");
  button.addEventListener("click", () => openPassage(source, button));
  return button;
}
