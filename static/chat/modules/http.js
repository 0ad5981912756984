/* fetch() for the page's JSON endpoints: same-origin, the CSRF token on every POST, an
 * error's message as the Error's; a 401 goes to the login page. */

import { csrfToken, data } from "./page.js";

export async function request(url, options) {
  const response = await fetch(url, Object.assign({ credentials: "same-origin" }, options));
  let payload = null;
  try {
    payload = await response.json();
  } catch (_) {
    payload = null;
  }
  if (response.status === 401) {
    location.assign(data.urls.login + "?next=" + encodeURIComponent(location.pathname));
  }
  if (!response.ok) {
    const message = payload && payload.error ? payload.error.message : "The server answered " + response.status + ".";
    throw new Error(message);
  }
  return payload;
}

export function postJSON(url, body) {
  return request(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken },
    body: JSON.stringify(body || {}),
  });
}
