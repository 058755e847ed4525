// Launch form: keep presets, objectives and tokenizers consistent with the choices made.
// The server validates everything again; this only keeps the form from offering what cannot run.
(function () {
  "use strict";
  const form = document.getElementById("run-form");
  const dataEl = document.getElementById("registry-data");
  if (!form || !dataEl) return;
  const registry = JSON.parse(dataEl.textContent);
  const $ = (name) => form.querySelector(`[name="${name}"]`);
  const arch = $("architecture"), preset = $("preset"), corpus = $("corpus"), tokenizer = $("tokenizer");

  function archSpec() {
    return registry.architectures.find((a) => a.name === arch.value) || registry.architectures[0];
  }

  function filterPresets() {
    const spec = archSpec();
    let selectedOk = false;
    for (const opt of preset.options) {
      const ok = opt.dataset.architecture === spec.name;
      opt.hidden = !ok;
      opt.disabled = !ok;
      if (ok && opt.selected) selectedOk = true;
    }
    if (!selectedOk) preset.value = spec.default_preset;
    const p = spec.presets.find((x) => x.name === preset.value);
    const seq = $("seq_len");
    if (p && seq) {
      seq.max = p.max_positions;
      seq.title = `At most ${p.max_positions} tokens for ${p.name}.`;
    }
  }

  function filterObjectives() {
    const spec = archSpec();
    form.querySelectorAll("input[type=hidden][data-required-objective]").forEach((el) => el.remove());
    const required = [];
    for (const label of form.querySelectorAll(".runs-objective")) {
      const name = label.dataset.objective;
      const box = label.querySelector("input[type=checkbox]");
      const compatible = spec.objectives.includes(name);
      label.hidden = !compatible;
      box.disabled = !compatible;
      if (!compatible) box.checked = false;
      if (spec.required_objectives.includes(name)) {
        box.checked = true;
        box.disabled = true; // a disabled box is not submitted: a hidden input carries it
        const hidden = document.createElement("input");
        hidden.type = "hidden"; hidden.name = "objectives"; hidden.value = name;
        hidden.dataset.requiredObjective = "1";
        label.appendChild(hidden);
        required.push(registry.objectives[name] ? registry.objectives[name].label : name);
      }
    }
    const note = document.getElementById("objectives-note");
    if (note) note.textContent = required.length ? `${spec.label} always trains with ${required.join(" and ")}.` : "";
  }

  function filterTokenizers() {
    const c = corpus.value;
    let keep = false;
    for (const opt of tokenizer.options) {
      if (!opt.value) continue;
      const ok = !c || opt.dataset.corpus === c;
      opt.hidden = !ok;
      opt.disabled = !ok;
      if (ok && opt.selected) keep = true;
    }
    if (!keep) {
      const first = Array.from(tokenizer.options).find((o) => o.value && !o.disabled);
      tokenizer.value = first ? first.value : "";
    }
  }

  function summary() {
    const out = document.getElementById("run-summary");
    if (!out) return;
    const n = (name) => Number(($(name) || {}).value || 0);
    const seqs = n("batch_size") * n("grad_accum");
    const tokens = seqs * n("seq_len");
    const total = tokens * n("max_steps");
    if (!seqs || !tokens) { out.textContent = ""; return; }
    const fmt = (x) => x >= 1e9 ? (x / 1e9).toFixed(1) + "B" : x >= 1e6 ? (x / 1e6).toFixed(1) + "M" : x.toLocaleString();
    out.textContent = `Each step sees ${seqs.toLocaleString()} sequences (up to ${tokens.toLocaleString()} tokens); ` +
      `${n("max_steps").toLocaleString()} steps read up to ${fmt(total)} tokens.`;
  }

  arch.addEventListener("change", () => { filterPresets(); filterObjectives(); });
  preset.addEventListener("change", filterPresets);
  corpus.addEventListener("change", filterTokenizers);
  tokenizer.addEventListener("change", () => {
    const opt = tokenizer.selectedOptions[0];
    if (opt && opt.dataset.corpus && corpus.value !== opt.dataset.corpus) {
      corpus.value = opt.dataset.corpus;
      filterTokenizers();
    }
  });
  form.addEventListener("input", summary);
  form.addEventListener("submit", () => {
    const button = document.getElementById("launch");
    if (button) { button.disabled = true; button.textContent = "Launching…"; }
  });

  filterPresets();
  filterObjectives();
  if (corpus.value) filterTokenizers();
  summary();
})();
