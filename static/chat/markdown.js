/* Markdown for model replies: marked → DOMPurify → highlight.js, with a copy button per code
 * block. Everything the model writes is untrusted: raw HTML in a reply is shown as text,
 * the sanitiser removes anything that could run (event handlers, javascript: links, <script>),
 * links open in a new tab without access to this page, and images are shown as links (the
 * page's Content-Security-Policy would block a foreign image anyway). No class or data-*
 * attribute from the model survives, except a code block's language class, so a reply cannot
 * imitate the page's own elements.
 */
(function () {
  "use strict";

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
  }

  window.marked.use({
    gfm: true,
    breaks: true, // a single newline is a line break: how people (and models) write Chinese text
    renderer: {
      html(token) {
        const text = escapeHtml(token.text);
        return token.block ? "<p>" + text.trim() + "</p>\n" : text;
      },
      image(token) {
        const label = token.text || token.href;
        return '<a href="' + escapeHtml(token.href) + '">' + escapeHtml(label) + "</a>";
      },
    },
  });

  const PURIFY = {
    FORBID_TAGS: [
      "style", "img", "svg", "math", "form", "input", "button", "textarea", "select", "option",
      "iframe", "frame", "object", "embed", "video", "audio", "source", "picture", "link", "meta",
      "base",
    ],
    FORBID_ATTR: ["style", "srcset", "action", "formaction", "xlink:href"],
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
    SANITIZE_NAMED_PROPS: true,
    ALLOW_DATA_ATTR: false, // no data-* from the model: the page's script reads some
  };

  // The only classes the model's HTML may carry: a code block's language (marked writes
  // `language-x` on <code>), which picks the highlighting. Any other class (the page's own
  // message, button or banner styles) would let a reply dress up as part of the UI.
  const CODE_LANGUAGE = /^language-[\w+#.-]+$/;

  window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.hasAttribute && node.hasAttribute("class")) {
      const keep = node.nodeName === "CODE"
        ? node.getAttribute("class").split(/\s+/).filter((c) => CODE_LANGUAGE.test(c))
        : [];
      if (keep.length) node.setAttribute("class", keep.join(" "));
      else node.removeAttribute("class");
    }
    if (node.nodeName === "A" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });

  const COPY_ICON =
    '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><rect x="9" y="9" width="11" height="11" rx="2"/><path d="M5 15V5a2 2 0 0 1 2-2h8"/></svg>';
  const CHECK_ICON =
    '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2.2" stroke-linecap="round" stroke-linejoin="round"><path d="M5 12.5l4.5 4.5L19 7"/></svg>';

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch (_) {
      // Plain http on a LAN address is not a secure context: no async clipboard there.
      const area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.className = "visually-hidden";
      document.body.append(area);
      area.select();
      let ok = false;
      try {
        ok = document.execCommand("copy");
      } catch (_) {
        ok = false;
      }
      area.remove();
      return ok;
    }
  }

  function flashCopied(button, label) {
    button.innerHTML = CHECK_ICON + (label ? "<span>Copied</span>" : "");
    button.classList.add("done");
    setTimeout(() => {
      button.innerHTML = COPY_ICON + (label ? "<span>Copy</span>" : "");
      button.classList.remove("done");
    }, 1500);
  }

  function highlight(code, lang, final) {
    const text = code.textContent;
    if (lang && window.hljs.getLanguage(lang)) {
      code.innerHTML = window.hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
      code.classList.add("hljs");
      return lang;
    }
    if (final && text.length < 20000) {
      // Guessing is slow and flickers while text still streams in: only once it is complete.
      const result = window.hljs.highlightAuto(text);
      code.innerHTML = result.value;
      code.classList.add("hljs");
      return result.language || "";
    }
    return lang;
  }

  function decorateCode(root, final) {
    for (const pre of root.querySelectorAll("pre")) {
      const code = pre.querySelector("code");
      if (!code) continue;
      const match = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
      const lang = highlight(code, match ? match[1].toLowerCase() : "", final);

      const block = document.createElement("div");
      block.className = "code-block";
      const head = document.createElement("div");
      head.className = "code-head";
      const name = document.createElement("span");
      name.textContent = lang || "text";
      const button = document.createElement("button");
      button.type = "button";
      button.className = "copy-code";
      button.setAttribute("aria-label", "Copy code");
      button.innerHTML = COPY_ICON + "<span>Copy</span>";
      button.addEventListener("click", async () => {
        if (await copyText(code.textContent)) flashCopied(button, true);
      });
      head.append(name, button);
      pre.tabIndex = 0; // a wide block scrolls sideways: keyboard users can scroll it too
      pre.replaceWith(block);
      block.append(head, pre);
    }
  }

  /** HTML made from the model's text, made safe to insert into the page. */
  function sanitize(html) {
    return window.DOMPurify.sanitize(html, PURIFY);
  }

  /** Render `text` (markdown from the model) into `element`; `final` once it stops changing. */
  function render(element, text, final) {
    element.innerHTML = sanitize(window.marked.parse(text || "", { async: false }));
    decorateCode(element, final);
  }

  window.QassistMarkdown = { render, sanitize, copyText, flashCopied, COPY_ICON, CHECK_ICON };
})();
