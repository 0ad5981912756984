/* A shared snapshot's sources opened whole (issue #31: its citations could not be opened):
 * each "Open the passage" button, and each [n] marker of a reply that names one, opens the
 * passage in a modal dialog, read through the reader's own access (GET /passages/<id>: a
 * passage of a document they may not read is a 404, said as such). */

const $ = (id) => document.getElementById(id);
let opener = null;
let seq = 0;

async function open(button, from) {
  const box = $("passage-dialog");
  opener = from;
  const mine = ++seq;
  $("passage-number").textContent = "Source " + button.dataset.number;
  $("passage-title").textContent = button.dataset.title;
  $("passage-where").textContent = button.dataset.where || "";
  $("passage-where").hidden = !button.dataset.where;
  const text = $("passage-text");
  text.textContent = "Loading the passage…";
  if (!box.open) box.showModal();
  $("passage-close").focus();
  let passage = null;
  try {
    const response = await fetch(button.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (!response.ok) throw new Error(response.status === 404 ? "it is not among the documents you may read" : "the server answered " + response.status);
    passage = await response.json();
  } catch (error) {
    if (mine === seq) text.textContent = "This passage cannot be opened: " + error.message + ".";
    return;
  }
  if (mine !== seq) return;
  $("passage-title").textContent = passage.title;
  $("passage-where").textContent = passage.where || "";
  $("passage-where").hidden = !passage.where;
  text.textContent = passage.text;
}

/** [n] in a rendered reply becomes a button opening source n, when the reply lists it. */
function linkMarkers(article) {
  const buttons = new Map(Array.from(article.querySelectorAll(".shared-open")).map((b) => [b.dataset.number, b]));
  if (!buttons.size) return;
  const walker = document.createTreeWalker(article.querySelector(".md"), NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) if (!walker.currentNode.parentElement.closest("pre, code")) nodes.push(walker.currentNode);
  for (const node of nodes) {
    const parts = node.textContent.split(/(\[\d{1,3}\])/);
    if (parts.length < 2) continue;
    const fragment = document.createDocumentFragment();
    for (const part of parts) {
      const source = buttons.get(part.slice(1, -1));
      if (!/^\[\d{1,3}\]$/.test(part) || !source) {
        fragment.append(part);
        continue;
      }
      const cite = document.createElement("button");
      cite.type = "button";
      cite.className = "cite";
      cite.textContent = part.slice(1, -1);
      cite.setAttribute("aria-label", "Source " + source.dataset.number + ": " + source.dataset.title);
      cite.setAttribute("aria-haspopup", "dialog");
      cite.addEventListener("click", () => open(source, cite));
      fragment.append("[", cite, "]");
    }
    node.replaceWith(fragment);
  }
}

export function wireSharedPassages() {
  const box = $("passage-dialog");
  if (!box) return;
  for (const button of document.querySelectorAll(".shared-open")) button.addEventListener("click", () => open(button, button));
  for (const article of document.querySelectorAll("#shared-messages .msg-assistant")) linkMarkers(article);
  $("passage-close").addEventListener("click", () => box.close());
  box.addEventListener("close", () => {
    if (opener) opener.focus();
  });
}
