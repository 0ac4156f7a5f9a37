// Stele's web UI: live updates over server-sent events, the child tree's expansion and
// actions answered in place. The pages work without it; it only adds to them.
"use strict";

(function () {
  const sources = [];
  let paused = false;

  // Replaces the element `target` with `html`; true when it shows a finished execution,
  // which changes no more.
  function replace(target, html) {
    const old = document.getElementById(target);
    if (!old) return false;
    const template = document.createElement("template");
    template.innerHTML = html;
    const fresh = template.content.firstElementChild;
    if (!fresh) return false;
    old.replaceWith(fresh);
    if (fresh.hasAttribute("data-finished")) {
      // Its actions are over; the answer of one just taken stays.
      document.querySelectorAll("section.actions details.action").forEach((action) => action.remove());
      return true;
    }
    return false;
  }

  function connect() {
    document.querySelectorAll("[data-live]").forEach((element) => {
      const source = new EventSource(element.getAttribute("data-live"));
      source.addEventListener("update", (event) => {
        const update = JSON.parse(event.data);
        if (replace(update.target, update.html)) source.close();
      });
      sources.push(source);
    });
  }

  function disconnect() {
    while (sources.length) sources.pop().close();
  }

  function toggle(button) {
    paused = !paused;
    button.setAttribute("aria-pressed", String(paused));
    button.textContent = paused ? "Resume live updates" : "Pause live updates";
    if (paused) disconnect();
    else connect();
  }

  async function load(url, into) {
    const response = await fetch(url, { headers: { Accept: "text/html" } });
    const html = await response.text();
    into.insertAdjacentHTML("beforeend", html);
  }

  document.addEventListener("toggle", (event) => {
    const details = event.target;
    if (!(details instanceof HTMLDetailsElement) || !details.open) return;
    const url = details.getAttribute("data-tree");
    if (!url || details.dataset.loaded) return;
    details.dataset.loaded = "true";
    const list = details.querySelector("ul.tree");
    if (list) load(url, list);
  }, true);

  document.addEventListener("click", (event) => {
    const more = event.target.closest("a[data-more]");
    if (!more) return;
    event.preventDefault();
    const item = more.closest("li");
    const list = item.parentElement;
    item.remove();
    load(more.getAttribute("data-more"), list);
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!form.hasAttribute("data-action")) return;
    event.preventDefault();
    const answer = document.getElementById("action-answer");
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)),
        headers: { "x-stele-in-place": "1" },
      });
      if (answer) answer.innerHTML = await response.text();
      const details = form.closest("details");
      if (details && response.ok) details.open = false;
    } catch (error) {
      if (answer) answer.textContent = "the node did not answer: " + error;
    } finally {
      if (button) button.disabled = false;
    }
  });

  // A page left behind keeps no connection open: a browser holds only a few per server.
  window.addEventListener("pagehide", disconnect);
  window.addEventListener("pageshow", (event) => {
    if (event.persisted && !paused && document.querySelector("[data-live]")) connect();
  });

  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("live-toggle");
    if (document.querySelector("[data-live]")) {
      if (button) {
        button.hidden = false;
        button.addEventListener("click", () => toggle(button));
      }
      connect();
    }
  });
})();
