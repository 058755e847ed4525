// Explorer: ask the JSON API and draw the answers in place (the form also works without this).
// With a checkpoint in "Compare with", every fill-mask and sentence-pair question goes to
// /api/explore/compare/ and the answers stand in two columns. The panels shown follow the chosen
// checkpoint's kind of model (data-kinds) and whether it is fine-tuned (data-pretrained); explorer_generate.js and explorer_attention.js draw
// the generation, span-filling, ELMo and attention tools.
(function () {
  "use strict";
  const form = document.getElementById("explore-form");
  if (!form) return;
  const text = document.getElementById("id_text");
  const select = document.getElementById("id_checkpoint");
  const compare = document.getElementById("id_compare_with");
  // each tool's endpoint and its name in the compare API (webapp.explorer.tools, drawn by the view)
  const TOOLS = Workbench.explorerTools();
  const pct = (v) => (100 * v).toFixed(1) + "%";

  const { el, postJSON } = Workbench;

  // ---- [MASK] button ------------------------------------------------------------------------
  document.getElementById("insert-mask").addEventListener("click", () => {
    const start = text.selectionStart ?? text.value.length, end = text.selectionEnd ?? start;
    const before = text.value.slice(0, start), after = text.value.slice(end);
    const pad = before && !/\s$/.test(before) ? " " : "";
    text.value = before + pad + "[MASK]" + after;
    const caret = (before + pad + "[MASK]").length;
    text.focus();
    text.setSelectionRange(caret, caret);
  });

  // ---- checkpoint choice ----------------------------------------------------------------------
  // A button stays enabled while at least one chosen checkpoint can answer; a column whose
  // checkpoint cannot says why in its own place.
  function chosen() {
    return [select.selectedOptions[0], compare && compare.value ? compare.selectedOptions[0] : null].filter(Boolean);
  }

  function onCheckpoint() {
    const url = new URL(location.href);
    url.searchParams.set("checkpoint", select.value);
    if (compare && compare.value) url.searchParams.set("compare", compare.value); else url.searchParams.delete("compare");
    history.replaceState(null, "", url);
    const gone = document.getElementById("checkpoint-gone");
    if (gone) gone.hidden = true;
    const opt = select.selectedOptions[0];
    const runLink = document.getElementById("checkpoint-run");
    const origin = document.getElementById("checkpoint-origin");
    if (runLink && opt) { runLink.textContent = opt.dataset.runName; runLink.href = opt.dataset.runUrl; }
    if (origin && opt) origin.textContent = opt.dataset.origin;
    // what this checkpoint can do (a fine-tuned one: its task, not fill-mask), the server's sentence
    const about = document.getElementById("checkpoint-kind");
    if (about && opt) about.textContent = opt.dataset.about || "";
    const opts = chosen();
    const able = {
      fill_mask: opts.some((o) => o.dataset.mlm === "1"),
      next_sentence: opts.some((o) => o.dataset.nsp === "1"),
      sentence_order: opts.some((o) => o.dataset.pair !== ""),
    };
    const why = {
      fill_mask: "This model has no trained masked-language-model head.",
      next_sentence: "This model was trained without next sentence prediction.",
      sentence_order: "This model has no sentence-pair head (NSP or SOP).",
    };
    // Panels for the chosen checkpoint's kind of model (encoder, unilm, t5, gpt, elmo) only; a
    // fine-tuned one (data-task) hides the pre-training panels (data-pretrained), which its task head
    // cannot answer. Both here, in one pass: shown by kind and hidden again by the task in another
    // script, a pre-training panel stood visible in between, until that script had loaded.
    const kind = opt ? opt.dataset.kind || "encoder" : "";
    const task = opt ? opt.dataset.task || "" : "";
    form.dataset.kind = kind;
    for (const node of form.querySelectorAll("[data-kinds]")) {
      node.hidden = (Boolean(kind) && !node.dataset.kinds.split(" ").includes(kind))
        || (Boolean(task) && node.hasAttribute("data-pretrained"));
    }
    for (const action of Object.keys(able)) {
      const button = form.querySelector(`button[value="${action}"]`);
      button.disabled = !able[action];
      button.title = able[action] ? "" : why[action];
      // said beside the greyed button too, not only in a tooltip a touch screen never shows
      let note = form.querySelector(`[data-why="${action}"]`);
      if (!note) {
        note = document.createElement("span");
        note.className = "muted small why-disabled";
        note.dataset.why = action;
        button.after(note);
      }
      note.textContent = able[action] ? "" : why[action];
      note.hidden = able[action];
    }
  }
  select.addEventListener("change", onCheckpoint);
  if (compare) compare.addEventListener("change", onCheckpoint);
  onCheckpoint();

  // ---- drawing --------------------------------------------------------------------------------
  function drawMasks(box, masks) {
    masks.forEach((mask, i) => {
      const wrap = el("div", "explorer-mask");
      const h = el("h3", "", `[MASK] #${i + 1} `);
      h.appendChild(el("span", "muted small", `(token ${mask.position})`));
      const chart = el("div", "explorer-chart");
      wrap.append(h, chart);
      box.appendChild(wrap);
      const preds = mask.predictions.slice().reverse(); // most likely on top
      Plotly.newPlot(chart, [{
        type: "bar", orientation: "h",
        x: preds.map((p) => p.prob), y: preds.map((p, j) => `${p.token}\u200b${"\u200b".repeat(j)}`),
        text: preds.map((p) => pct(p.prob)), textposition: "auto",
        hovertemplate: "%{y}: %{x:.2%}<extra></extra>", marker: { color: "#3f5bd9" },
      }], {
        height: 60 + 26 * preds.length, margin: { l: 110, r: 16, t: 8, b: 30 },
        xaxis: { tickformat: ".0%", range: [0, Math.max(0.05, ...preds.map((p) => p.prob)) * 1.1] },
        yaxis: { automargin: true, tickfont: { family: "ui-monospace, monospace" } },
      }, { displayModeBar: false, responsive: true });
    });
    const note = masks.length && masks[0].note;
    if (note) box.appendChild(el("p", "helptext explorer-note", note));
  }

  function meter(value, title) {
    const m = el("div", "explorer-meter");
    if (title) m.title = title;
    const bar = el("div");
    bar.style.width = pct(value);
    m.appendChild(bar);
    return m;
  }

  function drawNsp(box, result) {
    const wrap = el("div", "explorer-nsp");
    const p = el("p");
    p.append(el("b", "", pct(result.is_next)), ` is next · ${pct(result.not_next)} not next`);
    wrap.append(meter(result.is_next, "P(IsNext)"), p);
    box.appendChild(wrap);
  }

  function drawOrder(box, result) {
    const wrap = el("div", "explorer-order");
    for (const [side, label] of [["ab", "A → B"], ["ba", "B → A"]]) {
      const cell = el("div", "explorer-order-side");
      cell.append(el("span", "muted small", label), meter(result[side]), el("b", "", pct(result[side])));
      wrap.appendChild(cell);
    }
    box.append(wrap, el("p", "helptext", result.judges_order
      ? "P(in order), from the sentence-order head."
      : "P(IsNext) of each order: this model has a next-sentence head, no sentence-order head."));
  }

  const DRAW = { fill_mask: (box, r) => drawMasks(box, r.masks), next_sentence: drawNsp, sentence_order: drawOrder };

  function target(action) {
    if (action === "fill_mask") return document.getElementById("fill-mask-results");
    const panel = document.getElementById(action === "next_sentence" ? "next-sentence-result" : "sentence-order-result");
    panel.hidden = false;
    return panel.querySelector("[data-columns]");
  }

  function drawColumns(action, columns) {
    const box = target(action);
    box.replaceChildren();
    const row = el("div", "explorer-columns" + (columns.length > 1 ? " two" : ""));
    box.appendChild(row); // attached first, so that the charts measure the width they really get
    for (const col of columns) {
      const cell = el("div", "explorer-column");
      if (columns.length > 1) cell.appendChild(el("h3", "explorer-column-head", col.label));
      row.appendChild(cell);
      if (col.error) cell.appendChild(el("p", "error", col.error));
      else DRAW[action](cell, col.result);
    }
  }

  function clear(action) {
    if (action === "fill_mask") document.getElementById("fill-mask-results").replaceChildren();
    else document.getElementById(action === "next_sentence" ? "next-sentence-result" : "sentence-order-result").hidden = true;
  }

  const initial = document.getElementById("fill-mask-data");
  if (initial) drawColumns("fill_mask", JSON.parse(initial.textContent));

  // ---- asking -----------------------------------------------------------------------------------
  function showError(action, message) {
    form.querySelector(`[data-error="${action}"]`).textContent = message || "";
  }

  function inputs(action) {
    if (action === "fill_mask") return { text: text.value, top_k: Number(document.getElementById("id_top_k").value || 5) };
    return { text_a: document.getElementById("id_text_a").value, text_b: document.getElementById("id_text_b").value };
  }

  form.addEventListener("submit", async (event) => {
    const action = event.submitter && event.submitter.value;
    if (!action || !DRAW[action]) return;  // the other tools' scripts answer theirs
    event.preventDefault();
    const comparing = compare && compare.value;
    const url = comparing ? form.dataset.compare : TOOLS[action].url;
    const body = comparing
      ? { checkpoints: [select.value, compare.value], task: TOOLS[action].compare, inputs: inputs(action) }
      : { checkpoint: select.value, ...inputs(action) };
    const button = event.submitter;
    button.disabled = true;
    showError(action, "");
    try {
      let data;
      try {
        data = await postJSON(url, body);
      } catch (e) {
        showError(action, e.message);
        clear(action);
        return;
      }
      const columns = comparing ? data.results
        : [{ checkpoint: data.checkpoint, label: select.selectedOptions[0].textContent.trim(), result: data, error: null }];
      drawColumns(action, columns);
    } catch (e) {
      showError(action, "The answer came but could not be drawn. Reload the page and try again.");
    } finally {
      button.disabled = false;
      onCheckpoint();
    }
  });
})();
