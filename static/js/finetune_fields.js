"use strict";
(() => {
  // The fine-tuning form shows the settings of the chosen checkpoint's family, dataset task and
  // technique; the server picks them (webapp/runs/forms.py, FinetuneForm), and without this
  // script its "Show the settings for these choices" button posts the form back to do so. Here a
  // change of those choices fetches the same page for them and swaps the settings in place,
  // keeping the values already typed.
  const form = document.getElementById("finetune-form");
  const settings = document.getElementById("ft-settings");
  if (!form || !settings) return;
  const button = document.getElementById("ft-refresh");
  if (button) button.remove();  // Enter in a field launches, as the only submit button is Launch
  const CHOICES = ["checkpoint", "dataset", "technique", "extra_datasets"];
  let pending = null;

  const refresh = async () => {
    const body = new FormData(form);
    body.set("refresh", "1");
    const controller = new AbortController();
    if (pending) pending.abort();
    pending = controller;
    let html;
    try {
      const response = await fetch(form.action || window.location.href, {method: "POST", body,
        signal: controller.signal, headers: {"X-Requested-With": "fetch"}});
      if (!response.ok) return;
      html = await response.text();
    } catch (e) {
      return;  // aborted by a newer choice, or offline: the settings shown stay
    }
    const page = new DOMParser().parseFromString(html, "text/html");
    const fresh = page.getElementById("ft-settings");
    if (!fresh) return;
    const open = new Set(Array.from(settings.querySelectorAll("details[open]")).map(d => d.closest("section").id));
    settings.replaceChildren(...fresh.childNodes);
    const note = document.getElementById("ft-technique-note");
    const freshNote = page.getElementById("ft-technique-note");
    if (note && freshNote) note.textContent = freshNote.textContent;
    const stale = document.getElementById("ft-refresh");
    if (stale) stale.remove();
    for (const details of settings.querySelectorAll("details")) {
      if (open.has(details.closest("section").id)) details.open = true;
    }
    form.dataset.refreshed = String(Number(form.dataset.refreshed || 0) + 1);  // how many swaps (tests wait on it)
    document.dispatchEvent(new CustomEvent("finetune:settings"));
  };

  form.addEventListener("change", (event) => {
    if (CHOICES.includes(event.target.name)) refresh();
  });
})();
