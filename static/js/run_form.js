// Launch form: keep presets, objectives, masking units, packing, family settings, the optimizer's
// settings and tokenizers consistent with the family chosen; everything comes from the
// registry JSON on the page.
// The server validates everything again; this only keeps the form from offering what cannot run.
(function () {
  "use strict";
  const form = document.getElementById("run-form");
  const dataEl = document.getElementById("registry-data");
  if (!form || !dataEl) return;
  const registry = JSON.parse(dataEl.textContent);
  const $ = (name) => form.querySelector(`[name="${name}"]`);
  const arch = $("family"), preset = $("preset"), corpus = $("corpus"), tokenizer = $("tokenizer");
  const unit = $("masking_unit"), packing = $("packing"), teacher = $("teacher_checkpoint");
  const optimizer = $("optimizer");
  const urls = (document.getElementById("run-form-urls") || {}).dataset || {};

  function archSpec() {
    return registry.families.find((a) => a.name === arch.value) || registry.families[0];
  }

  function filterPresets() {
    const spec = archSpec();
    let selectedOk = false;
    for (const opt of preset.options) {
      const ok = opt.dataset.family === spec.name;
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
    // What seq_len means for the family (T5: the encoder's input; its targets follow).
    const help = seq && seq.closest(".field") && seq.closest(".field").querySelector(".helptext");
    if (help) {
      if (help.dataset.base === undefined) help.dataset.base = help.textContent;
      help.textContent = spec.seq_len_help ? `${help.dataset.base} ${spec.seq_len_help}` : help.dataset.base;
    }
  }

  // Settings that do nothing for the family (masking for GPT and ELMo, packing for the
  // sequence-to-sequence and language-model families) are hidden; their values stay the
  // defaults the server expects.
  function filterHiddenFields() {
    const hidden = archSpec().hidden_fields || [];
    for (const wrap of form.querySelectorAll(".field[data-field]")) {
      if (wrap.closest("[data-families]")) continue;
      wrap.hidden = hidden.includes(wrap.dataset.field);
    }
  }

  // AdamW's betas and epsilon only for AdamW; the empty choice names the family's optimizer.
  function filterOptimizer() {
    if (!optimizer) return;
    const spec = archSpec();
    const own = (spec.optimizer_defaults || {}).optimizer || "adamw";
    const first = Array.from(optimizer.options).find((o) => !o.value);
    const label = (name) => (Array.from(optimizer.options).find((o) => o.value === name) || {}).textContent || name;
    if (first) first.textContent = `${spec.label}'s default: ${label(own).replace(/ \(.*\)$/, "")}`;
    const chosen = optimizer.value || own;
    for (const name of ["betas", "eps"]) {
      const wrap = ($(name) || {}).closest ? $(name).closest(".field") : null;
      if (wrap) wrap.hidden = chosen !== "adamw";
    }
  }

  // resetDefaults (a new family was chosen): check its default objectives, as the API does.
  function filterObjectives(resetDefaults) {
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
      else if (resetDefaults) box.checked = spec.default_objectives.includes(name);
      if (spec.one_objective && compatible && !box.dataset.oneOf) {
        box.dataset.oneOf = "1"; // one objective per run: checking one unchecks the others
        box.addEventListener("change", () => {
          if (!box.checked || !archSpec().one_objective) return;
          form.querySelectorAll('.runs-objective input[type=checkbox]').forEach((other) => {
            if (other !== box) other.checked = false;
          });
          filterUnits(); checkTokenizer();
        });
      }
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
    if (spec.one_objective) {
      const checked = Array.from(form.querySelectorAll(".runs-objective input[type=checkbox]")).filter((b) => b.checked);
      if (checked.length !== 1) {
        checked.forEach((b) => { b.checked = false; });
        const label = form.querySelector(`.runs-objective[data-objective="${spec.default_objectives[0]}"] input`);
        if (label) label.checked = true;
      }
    }
    const note = document.getElementById("objectives-note");
    if (note) note.textContent = required.length ? `${spec.label} always trains with ${required.join(" and ")}.`
      : spec.one_objective ? `${spec.label} trains one objective per run.` : "";
  }

  function selectedObjectives() {
    return Array.from(form.querySelectorAll('input[name="objectives"]'))
      .filter((el) => (el.type === "hidden" || el.checked)).map((el) => el.value);
  }

  // Masking units and packings the family (and its objectives) allow; the empty choice
  // means "the family's default" and says which one that is.
  function filterUnits() {
    const spec = archSpec();
    if (unit) {
      for (const opt of unit.options) {
        if (!opt.value) {
          opt.textContent = `Default for ${spec.label}: ${unitLabel(spec.default_masking_unit)}`;
          continue;
        }
        const ok = spec.masking_units.includes(opt.value);
        opt.hidden = !ok; opt.disabled = !ok;
        if (!ok && opt.selected) unit.value = "";
      }
    }
    if (packing) {
      const pairs = selectedObjectives().some((o) => (registry.pair_objectives || []).includes(o));
      for (const opt of packing.options) {
        if (!opt.value) continue;
        const ok = spec.packings.includes(opt.value) && !(pairs && opt.value === "doc-sentences");
        opt.hidden = !ok; opt.disabled = !ok;
        if (!ok && opt.selected) packing.value = "";
      }
      const wrap = packing.closest(".field");
      if (wrap) {
        const help = wrap.querySelector(".helptext");
        if (help && !help.dataset.base) help.dataset.base = help.textContent;
        if (help) help.textContent = pairs
          ? "These objectives train on sentence pairs, which stay inside one document; packing applies to single segments."
          : help.dataset.base;
      }
    }
  }

  function unitLabel(name) {
    const opt = unit && Array.from(unit.options).find((o) => o.value === name);
    return opt ? opt.textContent : name;
  }

  // Settings of one family (ELECTRA's generator size and RTD weight, ALBERT's sharing,
  // DistilBERT's teacher and loss weights): shown, and submitted, only for that family.
  function filterFamilyFields(resetDefaults) {
    const spec = archSpec();
    for (const wrap of form.querySelectorAll("[data-families]")) {
      const ok = wrap.dataset.families.split(" ").includes(spec.name);
      wrap.hidden = !ok;
      wrap.querySelectorAll("input, select").forEach((el) => { el.disabled = !ok; });
    }
    if (resetDefaults) {
      for (const f of spec.model_fields || []) {
        const el = $(f.name);
        if (el && el.tagName === "INPUT") el.placeholder = `${f.default} (the preset's)`;
      }
      const opt = spec.optimizer_defaults || {};
      for (const name of ["lr", "weight_decay", "schedule"]) {
        const el = $(name);
        if (el && opt[name] !== undefined) el.value = opt[name];
      }
      if (optimizer) optimizer.value = ""; // the family's own
      const betas = $("betas"), eps = $("eps");
      if (betas) betas.value = (opt.betas || registry.fields.betas.default).join(", ");
      if (eps) eps.value = opt.eps !== undefined ? opt.eps : registry.fields.eps.default;
    }
    const about = document.getElementById("arch-about");
    if (about) about.textContent = spec.about || "";
    filterTeachers();
  }

  function filterTeachers() {
    const note = document.getElementById("teacher-note");
    if (!teacher || !note) return;
    const spec = archSpec();
    if (!spec.needs_teacher) { note.hidden = true; return; }
    const tok = tokenizer.value;
    let any = false, keep = false;
    for (const opt of teacher.options) {
      if (!opt.value) continue;
      const ok = !tok || !opt.dataset.tokenizer || opt.dataset.tokenizer === tok;
      opt.hidden = !ok; opt.disabled = !ok;
      if (ok) any = true;
      if (ok && opt.selected) keep = true;
    }
    if (!keep) teacher.value = "";
    note.hidden = any;
    note.textContent = any ? "" : "None of your BERT checkpoints was trained with this tokenizer: train a BERT run on it " +
      "first, then distil it here.";
  }

  // A tokenizer of the wrong algorithm cannot be used (e.g. RoBERTa reads byte-level BPE):
  // say which one to train, and where.
  function checkTokenizer() {
    const box = document.getElementById("tokenizer-warning");
    const button = document.getElementById("launch");
    if (!box) return;
    const spec = archSpec();
    const opt = tokenizer.selectedOptions[0];
    const algorithm = opt && opt.value ? opt.dataset.algorithm : "";
    const bad = algorithm && !spec.tokenizer_algorithms.includes(algorithm);
    // T5's span corruption writes sentinel tokens, which the tokenizer must have.
    const sentinelBox = document.getElementById("sentinel-warning");
    const needs = selectedObjectives().filter((o) => (spec.sentinel_objectives || []).includes(o));
    const noSentinels = !bad && algorithm && needs.length && opt.dataset.extraIds === "0";
    if (sentinelBox) {  // beside the launch button, which it turns off
      sentinelBox.hidden = !noSentinels;
      sentinelBox.textContent = "";
      if (noSentinels) {
        sentinelBox.append(`${registry.objectives[needs[0]].label} replaces each noise span by a sentinel token ` +
          `(<extra_id_0>, ...), and “${opt.textContent.trim()}” has none: `);
        // the corpus page's tokenizer form, on this algorithm, whose default is T5's 100 sentinels
        sentinelBox.append(corpusLink(opt, algorithm, "train a tokenizer with 100 sentinel tokens"),
          ", or choose another objective.");
      }
    }
    const blocked = document.getElementById("launch-blocked");
    if (blocked) {
      blocked.hidden = !bad;
      blocked.textContent = bad ? `The tokenizer does not suit ${spec.label}: see the note under the tokenizer.` : "";
    }
    box.hidden = !bad;
    box.textContent = "";
    const wrap = tokenizer.closest(".field");
    if (wrap) wrap.classList.toggle("has-error", !!bad);
    if (button && button.dataset.noTokenizers !== "1") button.disabled = !!bad || !!noSentinels;
    if (!bad) return;
    const names = registry.tokenizer_algorithms || {};
    const want = spec.default_tokenizer_algorithm;
    box.append(`${spec.label} needs a ${names[want] || want} tokenizer; “${opt.textContent.trim()}” is ` +
      `${names[algorithm] || algorithm}. `);
    box.append(corpusLink(opt, want, `Train a ${names[want] || want} tokenizer on the corpus page`), ".");
  }

  // A link to the tokenizer form of the chosen tokenizer's corpus, on `algorithm` (its defaults follow).
  function corpusLink(opt, algorithm, text) {
    const link = document.createElement("a");
    const corpusId = opt.dataset.corpus;
    const page = corpusId && urls.corpus ? urls.corpus.replace("00000000-0000-0000-0000-000000000000", corpusId)
      : "";
    link.href = page ? `${page}?algorithm=${encodeURIComponent(algorithm)}#train-tokenizer` : (urls.corpora || "/");
    link.textContent = text;
    return link;
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
    const devices = Math.max(1, n("devices") || 1);
    const seqs = n("batch_size") * n("grad_accum") * devices;
    const tokens = seqs * n("seq_len");
    const total = tokens * n("max_steps");
    if (!seqs || !tokens) { out.textContent = ""; return; }
    const fmt = (x) => x >= 1e9 ? (x / 1e9).toFixed(1) + "B" : x >= 1e6 ? (x / 1e6).toFixed(1) + "M" : x.toLocaleString();
    const across = devices > 1 ? ` (${n("batch_size")} × ${n("grad_accum")} × ${devices} devices)` : "";
    const length = n("epochs")  // a run given in epochs: its steps are counted once the worker has read the data
      ? `${n("epochs").toLocaleString()} epochs (passes over the train split; the steps are counted when the run starts).`
      : `${n("max_steps").toLocaleString()} steps read up to ${fmt(total)} tokens.`;
    out.textContent = `Effective batch: each step sees ${seqs.toLocaleString()} sequences${across} ` +
      `(up to ${tokens.toLocaleString()} tokens); ` + length;
  }

  arch.addEventListener("change", () => {
    filterPresets(); filterObjectives(true); filterUnits(); filterFamilyFields(true); filterHiddenFields();
    filterOptimizer(); checkTokenizer();
  });
  if (optimizer) optimizer.addEventListener("change", filterOptimizer);
  preset.addEventListener("change", filterPresets);
  corpus.addEventListener("change", () => { filterTokenizers(); checkTokenizer(); filterTeachers(); });
  tokenizer.addEventListener("change", () => {
    const opt = tokenizer.selectedOptions[0];
    if (opt && opt.dataset.corpus && corpus.value !== opt.dataset.corpus) {
      corpus.value = opt.dataset.corpus;
      filterTokenizers();
    }
    checkTokenizer();
    filterTeachers();
  });
  form.querySelectorAll('input[name="objectives"]').forEach((box) => box.addEventListener("change", () => {
    filterUnits(); checkTokenizer();
  }));
  form.addEventListener("input", summary);
  form.addEventListener("submit", () => {
    const button = document.getElementById("launch");
    if (button) { button.disabled = true; button.textContent = "Launching…"; }
  });

  const launchButton = document.getElementById("launch");
  if (launchButton && launchButton.disabled) launchButton.dataset.noTokenizers = "1";
  filterPresets();
  filterObjectives(false);
  filterUnits();
  filterFamilyFields(false);
  filterHiddenFields();
  filterOptimizer();
  if (corpus.value) filterTokenizers();
  checkTokenizer();
  summary();
})();
