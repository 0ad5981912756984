/* A shared snapshot's page (templates/sharing/shared.html): each reply's Markdown, kept as
 * text by the server, rendered by the same sanitising renderer as the chat's; its sources
 * opened whole; the theme toggle. */

import { wireSharedPassages } from "./modules/shared_passage.js";
import { wireTheme } from "./modules/theme.js";

const md = window.QassistMarkdown;
for (const el of document.querySelectorAll(".md-source")) {
  md.render(el, el.textContent, true);
  el.classList.remove("md-source");
}
wireTheme();
wireSharedPassages();
