"use strict";
(() => {
  // The fine-tuning form offers only the datasets the chosen checkpoint fine-tunes on: each
  // checkpoint option names its tasks (data-tasks), each dataset option its task (data-task) and
  // whether it is ready (data-ready). The server disables the same options for the checkpoint it
  // rendered with (webapp/runs/forms.py, FinetuneForm) and still refuses a pair that does not fit.
  const checkpoint = document.getElementById("id_checkpoint");
  const dataset = document.getElementById("id_dataset");
  const note = document.getElementById("ft-fit-note");
  if (!checkpoint || !dataset) return;
  const extras = () => document.querySelectorAll('input[name="extra_datasets"]');

  const update = () => {
    const chosen = checkpoint.selectedOptions[0];
    const picked = chosen && chosen.value ? chosen : null;
    const tasks = picked ? (picked.dataset.tasks || "").split(" ").filter(Boolean) : null;
    let fitting = 0;
    for (const option of dataset.options) {
      if (!option.value) continue;  // the empty choice
      const ready = option.dataset.ready === "1";
      const fits = ready && (tasks === null || tasks.includes(option.dataset.task));
      if (ready && fits) fitting += 1;
      option.disabled = !fits;
      option.hidden = ready && !fits;  // an incompatible dataset is not offered; one not ready shows its state
      if (!fits && option.selected) dataset.value = "";
    }
    for (const box of extras()) {
      const mixes = box.dataset.ready === "1" && box.dataset.mixable === "1" &&
        (tasks === null || picked.dataset.mixes === "1");
      box.disabled = !mixes;
      if (!mixes) box.checked = false;
    }
    if (note) {
      if (!picked) {
        note.textContent = "";
      } else {
        const count = fitting === 0 ? "None of your ready datasets fits it."
          : `${fitting} of your ready datasets ${fitting === 1 ? "fits" : "fit"} it.`;
        note.textContent = `${picked.dataset.note || ""} ${count}`;
      }
    }
  };
  checkpoint.addEventListener("change", update);
  update();
})();
