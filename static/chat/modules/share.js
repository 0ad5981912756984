/* Export and share (docs/ui.md, "Export and share"): the topbar's Markdown download, and the
 * dialog that makes, lists and revokes read-only snapshot links for the tenant's members. */

import { div, textButton } from "./dom.js";
import { postJSON, request } from "./http.js";
import { announce } from "./notices.js";
import { $, data, state, urlFor } from "./page.js";

/** The topbar's export and share buttons follow the conversation shown (none on a new chat;
 * an archived one exports, it does not share). */
export function updateConversationTools() {
  const exportLink = $("export-btn");
  exportLink.hidden = !state.sessionId;
  if (state.sessionId) exportLink.href = urlFor("export", state.sessionId);
  $("share-btn").hidden = !state.sessionId || state.readOnly;
}

const when = (iso) => new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });

function linkItem(share, onRevoke) {
  const li = document.createElement("li");
  li.className = "share-item";
  const address = new URL(share.url, location.origin).href;
  const link = document.createElement("a");
  link.href = address;
  link.className = "share-url";
  link.textContent = address;
  const meta = div("share-meta", "Shared " + when(share.created_at) + " · " + share.messages + " messages");
  const copy = textButton("Copy link", async () => {
    try {
      await navigator.clipboard.writeText(address);
      announce("Link copied.");
      copy.textContent = "Copied";
    } catch (_) {
      link.focus();
    }
  }, "btn btn-small");
  const revoke = textButton("Revoke", () => onRevoke(share), "btn btn-small btn-danger");
  const buttons = div("share-buttons");
  buttons.append(copy, revoke);
  li.append(link, meta, buttons);
  return li;
}

async function renderLinks() {
  const list = $("share-list");
  const status = $("share-status");
  let shares = [];
  try {
    shares = (await request(urlFor("shares", state.sessionId), { headers: { Accept: "application/json" } })).shares;
  } catch (error) {
    status.textContent = "Could not load the links: " + error.message;
    return;
  }
  list.replaceChildren(...shares.map((share) => linkItem(share, revoke)));
  list.hidden = shares.length === 0;
  if (!shares.length && !status.textContent) status.textContent = "No link to this conversation yet.";
}

async function create() {
  const status = $("share-status");
  const button = $("share-create");
  button.disabled = true;
  try {
    await postJSON(urlFor("share", state.sessionId), {});
    status.textContent = "Link created: anyone in " + data.tenantName + " with it can read this snapshot.";
  } catch (error) {
    status.textContent = "Could not create a link: " + error.message;
  } finally {
    button.disabled = false;
  }
  await renderLinks();
  const first = $("share-list").querySelector(".share-url");
  if (first) first.focus();
}

async function revoke(share) {
  const status = $("share-status");
  try {
    await postJSON(urlFor("revoke", share.id), {});
    status.textContent = "Link revoked: it no longer opens, for anyone.";
  } catch (error) {
    status.textContent = "Could not revoke the link: " + error.message;
  }
  await renderLinks();
  $("share-create").focus();
}

export function wireShare() {
  const dialog = $("share-dialog");
  $("share-btn").addEventListener("click", () => {
    if (!state.sessionId) return;
    $("share-status").textContent = "";
    $("share-list").replaceChildren();
    dialog.showModal();
    renderLinks();
  });
  $("share-close").addEventListener("click", () => dialog.close());
  $("share-create").addEventListener("click", create);
  dialog.addEventListener("close", () => $("share-btn").focus());
  updateConversationTools();
}
