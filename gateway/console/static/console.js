// Broker console: live sections over server-sent events, and the auto-advance countdown.
// The server renders every section (escaped); this script only swaps them in. No inline script:
// the page's Content-Security-Policy forbids it.
"use strict";

(function () {
  const live = document.getElementById("live");
  const url = document.body.dataset.events;

  function setLive(text, ok) {
    if (!live) return;
    live.textContent = text;
    live.className = ok ? "live ok" : "live down";
  }

  function apply(sections) {
    for (const [id, html] of Object.entries(sections)) {
      const el = document.getElementById(id);
      if (!el) continue;
      // Keep open <details> open across updates (by their summary's text).
      const open = new Set(
        Array.from(el.querySelectorAll("details[open] > summary")).map((s) => s.textContent)
      );
      el.innerHTML = html;
      for (const s of el.querySelectorAll("details > summary")) {
        if (open.has(s.textContent)) s.parentElement.open = true;
      }
    }
  }

  function connect() {
    if (!url || !window.EventSource) return;
    const source = new EventSource(url);
    source.addEventListener("open", () => setLive("live", true));
    source.addEventListener("sections", (event) => {
      const data = JSON.parse(event.data);
      apply(data.sections);
      const badge = document.getElementById("state-badge");
      if (badge && data.state) {
        badge.textContent = data.state;
        badge.className = "state-badge state-" + data.state.toLowerCase();
        document.title = "Broker console · " + data.state;
      }
      document.body.dataset.version = String(data.version);
    });
    source.addEventListener("signed-out", () => window.location.replace("/broker"));
    source.addEventListener("error", () => setLive("reconnecting…", false));
  }

  function tick() {
    for (const el of document.querySelectorAll(".countdown[data-deadline]")) {
      const left = Math.max(0, Math.round((Date.parse(el.dataset.deadline) - Date.now()) / 1000));
      el.textContent = left + " s";
    }
  }

  connect();
  setInterval(tick, 1000);
})();
