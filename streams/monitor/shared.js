// What both pages of `safactory serve` share, put in place of /* shared.js */ when a page is
// served (every request needs the token where one is set, so no separate script file).
"use strict";
// Agent output is untrusted: every value goes into the page as text (textContent), never HTML.
const token = new URLSearchParams(location.search).get("token");
const withToken = (path) =>
  token ? path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : path;

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child ?? ""));
  }
  return node;
}
