// A model server's page (templates/serving/serve.html): follows the server's status through the
// JSON API (every second while it starts or stops, every 5 s while it serves) and reloads the
// page when the status changes, so the address, the snippets and the buttons always come from the
// server's row. A failed poll (the web server restarting) is tried again, more slowly.
(function () {
  "use strict";

  const card = document.querySelector("#serve-card[data-serve-url]");
  if (!card) return;
  const shown = card.dataset.serveStatus;
  if (shown === "stopped" || shown === "failed") return;
  let failures = 0;

  function later() {
    const every = shown === "serving" ? 5000 : 1000;
    setTimeout(tick, failures ? Math.min(10000, every * (1 + failures)) : every);
  }

  function tick() {
    fetch(card.dataset.serveUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (served) {
        failures = 0;
        if (served.status !== shown || (served.waiting_for_worker ? "1" : "") !== card.dataset.serveWaiting) {
          window.location.reload();
          return;
        }
        later();
      })
      .catch(function () {
        failures += 1;
        later();
      });
  }
  later();
})();
