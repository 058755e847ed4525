// Imports page: while an import is waiting or running, ask for its status every two seconds
// and reload the page when it is ready or has failed (the rows are drawn by the template).
(function () {
  "use strict";
  const section = document.getElementById("imports");
  if (!section) return;
  const waiting = Array.from(section.querySelectorAll("tr[data-in-flight='1']")).map((tr) => tr.dataset.import);
  if (!waiting.length) return;
  const base = section.dataset.api;

  async function poll() {
    for (const id of waiting) {
      try {
        const response = await fetch(`${base}${id}/`, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (response.status === 404) { location.reload(); return; }
        const data = await response.json();
        if (data.status === "ready" || data.status === "failed") { location.reload(); return; }
      } catch (e) {
        // the server is busy or unreachable for a moment: try again at the next tick
      }
    }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
