"use strict";
(() => {
  // The readiness panel (templates/runs/_readiness.html) follows the form's choices: when the
  // checkpoint or the dataset changes, the server renders the panel for the new pair
  // (runs:finetune-readiness: the checkpoint's pre-training record and its sentence vectors of
  // the dataset's examples, cached per pair) and it replaces the one on the page. Without
  // JavaScript the panel is the one the page was rendered with.
  const checkpoint = document.getElementById("id_checkpoint");
  const dataset = document.getElementById("id_dataset");
  if (!checkpoint || !dataset) return;
  let asked = 0;

  const refresh = async () => {
    const slot = document.getElementById("readiness-slot");
    if (!slot) return;
    const ticket = ++asked;
    const params = new URLSearchParams({ checkpoint: checkpoint.value || "", dataset: dataset.value || "" });
    slot.setAttribute("aria-busy", "true");
    try {
      const response = await fetch(`${slot.dataset.url}?${params}`, { credentials: "same-origin" });
      if (!response.ok || ticket !== asked) return;
      const html = await response.text();
      if (ticket !== asked) return;  // a newer choice answered first
      slot.outerHTML = html;
    } catch (_) {
      // offline or the server is gone: keep the panel as it is
    } finally {
      const current = document.getElementById("readiness-slot");
      if (current) current.removeAttribute("aria-busy");
    }
  };

  checkpoint.addEventListener("change", refresh);
  dataset.addEventListener("change", refresh);
})();
