// Explorer tools for fine-tuned checkpoints (classify, tag, answer) and any encoder (sentence
// embeddings): ask /api/explore/classify|tag|answer|embed/ and draw the answers in place.
// Which panels show follows the chosen checkpoint: data-tasks lists the fine-tuning tasks a panel
// serves (the option's data-task); a fine-tuned model hides the pre-training panels
// (data-pretrained: fill-mask, sentence pairs), which its task head cannot answer.
(function () {
  "use strict";
  const form = document.getElementById("explore-form");
  const select = document.getElementById("id_checkpoint");
  if (!form || !select) return;
  const { el, postJSON } = Workbench;
  const pct = (v) => (100 * v).toFixed(1) + "%";
  const COLORS = ["#3f5bd9", "#e0692b", "#2a9d5b", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d35400"];

  function onCheckpoint() {
    const opt = select.selectedOptions[0];
    const task = opt ? opt.dataset.task || "" : "";
    form.dataset.task = task;
    for (const node of form.querySelectorAll("[data-tasks]")) {
      node.hidden = !task || !node.dataset.tasks.split(" ").includes(task);
    }
    if (task) for (const node of form.querySelectorAll("[data-pretrained]")) node.hidden = true;
  }
  select.addEventListener("change", onCheckpoint);
  onCheckpoint();

  async function ask(action, url, body, draw) {
    const button = document.getElementById(`${action}-button`);
    const error = form.querySelector(`[data-error="${action}"]`);
    const box = document.getElementById(`${action}-result`);
    button.disabled = true;
    error.textContent = "";
    try {
      const data = await postJSON(url, { checkpoint: select.value, ...body });
      box.hidden = false;
      draw(box, data);
    } catch (e) {
      error.textContent = e.message || "The answer could not be drawn. Reload the page and try again.";
      box.hidden = true;
    } finally {
      button.disabled = false;
    }
  }

  // ---- classify ----------------------------------------------------------------------------------
  function drawClassify(box, data, keep) {
    if (!keep) box.replaceChildren();
    if (data.generated != null) {  // a T5 checkpoint writes its answer
      box.appendChild(el("p", "explorer-generated", "")).append("Generated: ", el("b", "", `«${data.generated}»`),
        data.predicted.length || data.value != null ? "" : (data.problem_type === "regression"
          ? " (not a number)" : " (not one of the labels: the run counts such an output wrong)"));
    }
    if (data.problem_type === "regression") {
      if (data.value != null) {
        box.appendChild(el("p", "explorer-value", "")).append("Predicted value: ", el("b", "", data.value.toFixed(4)));
      }
    } else {
      const predicted = new Set(data.predicted);
      const list = el("div", "explorer-probs");
      for (const row of data.labels) {
        const line = el("div", "explorer-prob" + (predicted.has(row.label) ? " predicted" : ""));
        line.dataset.label = row.label;
        const bar = el("div", "explorer-meter");
        const fill = el("div");
        fill.style.width = pct(row.probability);
        bar.appendChild(fill);
        line.append(el("span", "explorer-prob-label", row.label), bar, el("b", "", pct(row.probability)));
        list.appendChild(line);
      }
      box.appendChild(list);
      box.appendChild(el("p", "helptext", data.problem_type === "multi_label_classification"
        ? `A sigmoid per label; predicted above ${pct(data.threshold)}: ${data.predicted.join(", ") || "none"}.`
        : `Predicted: ${data.predicted.join(", ") || "none"}.`));
    }
    if (data.truncated) box.appendChild(el("p", "helptext", `The text was cut to ${data.max_length} tokens.`));
  }
  // With a checkpoint in "Compare with", both classify the text, one column each (/api/explore/compare/).
  const compare = document.getElementById("id_compare_with");
  async function classifyBoth(inputs) {
    const button = document.getElementById("classify-button");
    const error = form.querySelector('[data-error="classify"]');
    const box = document.getElementById("classify-result");
    button.disabled = true;
    error.textContent = "";
    try {
      const data = await postJSON(form.dataset.compare, {
        checkpoints: [select.value, compare.value], task: "classify", inputs });
      box.hidden = false;
      box.replaceChildren();
      const row = el("div", "explorer-columns two");
      box.appendChild(row);
      for (const col of data.results) {
        const cell = el("div", "explorer-column");
        cell.appendChild(el("h3", "explorer-column-head", col.label));
        row.appendChild(cell);
        if (col.error) cell.appendChild(el("p", "error", col.error));
        else drawClassify(cell, col.result, true);
      }
    } catch (e) {
      error.textContent = e.message;
      box.hidden = true;
    } finally {
      button.disabled = false;
    }
  }
  document.getElementById("classify-button").addEventListener("click", () => {
    const inputs = { text: document.getElementById("id_classify_text").value,
                     text_b: document.getElementById("id_classify_text_b").value };
    if (compare && compare.value) classifyBoth(inputs);
    else ask("classify", form.dataset.classify, inputs, drawClassify);
  });

  // ---- highlighted spans -------------------------------------------------------------------------
  // The text with the spans (sorted, not overlapping) wrapped in <mark>, built from text nodes.
  function highlighted(text, spans, label) {
    const p = el("p", "explorer-highlighted");
    let at = 0;
    for (const s of spans) {
      if (s.start < at) continue;
      p.appendChild(document.createTextNode(text.slice(at, s.start)));
      const mark = el("mark", s.className || "", text.slice(s.start, s.end));
      if (s.color) mark.style.background = s.color;
      if (label(s)) { mark.dataset.type = label(s); mark.title = label(s); mark.appendChild(el("sup", "", label(s))); }
      p.appendChild(mark);
      at = s.end;
    }
    p.appendChild(document.createTextNode(text.slice(at)));
    return p;
  }

  // ---- tag ---------------------------------------------------------------------------------------
  function drawTag(box, data) {
    box.replaceChildren();
    const text = document.getElementById("id_tag_text").value.trim();
    const types = [...new Set(data.entities.map((e) => e.type))];
    const color = (t) => COLORS[types.indexOf(t) % COLORS.length] + "33";
    const spans = data.entities.map((e) => ({ ...e, color: color(e.type) }));
    box.appendChild(highlighted(text, spans, (s) => s.type));
    box.appendChild(el("p", "helptext", data.entities.length
      ? data.entities.map((e) => `${e.text} (${e.type}, ${pct(e.score)})`).join(" · ")
      : "No entity found: every word was tagged O."));
    const tags = el("p", "helptext mono");
    tags.textContent = data.words.map((w) => `${w.text}/${w.tag}`).join(" ");
    box.appendChild(tags);
    if (data.truncated) box.appendChild(el("p", "helptext", "The words past the model's length got no tag."));
  }
  document.getElementById("tag-button").addEventListener("click", () => ask("tag", form.dataset.tag, {
    text: document.getElementById("id_tag_text").value,
  }, drawTag));

  // ---- answer ------------------------------------------------------------------------------------
  function drawAnswer(box, data) {
    box.replaceChildren();
    const context = document.getElementById("id_qa_context").value.trim();
    const a = data.answer;
    if (a.text) {
      box.appendChild(el("p", "")).append("Answer: ", el("b", "explorer-answer", a.text),
        el("span", "muted small", ` score ${a.score.toFixed(2)} (no-answer score ${data.null_score.toFixed(2)})`));
      box.appendChild(highlighted(context, [{ start: a.start, end: a.end, className: "answer" }], () => ""));
    } else {
      box.appendChild(el("p", "explorer-answer none",
        `No answer: the no-answer score ${data.null_score.toFixed(2)} beats the best span by more than ${data.threshold}.`));
    }
    if (data.n_best.length) {
      box.appendChild(el("h3", "explorer-subhead", `The ${data.n_best.length} best spans`));
      const list = el("ol", "explorer-nbest");
      for (const c of data.n_best) list.appendChild(el("li", "", `${c.text} (${c.score.toFixed(2)})`));
      box.appendChild(list);
    }
  }
  document.getElementById("answer-button").addEventListener("click", () => ask("answer", form.dataset.answer, {
    question: document.getElementById("id_qa_question").value,
    context: document.getElementById("id_qa_context").value,
    n_best: Number(document.getElementById("id_qa_n_best").value || 5),
  }, drawAnswer));

  // ---- sentence embeddings -----------------------------------------------------------------------
  function drawEmbed(box, data) {
    const short = (s) => (s.length > 40 ? s.slice(0, 38) + "…" : s);
    const labels = data.sentences.map((s, i) => `${i + 1}. ${short(s)}`);
    Plotly.react("embed-chart", [{
      type: "heatmap", x: labels, y: labels, z: data.similarity, zmin: -1, zmax: 1, colorscale: "RdBu", reversescale: true,
      text: data.similarity.map((row) => row.map((v) => v.toFixed(3))), texttemplate: "%{text}",
      hovertemplate: "%{y}<br>%{x}<br>cosine %{z:.3f}<extra></extra>",
    }], {
      height: 180 + 48 * labels.length, margin: { l: 220, r: 16, t: 16, b: 160 },
      xaxis: { type: "category", tickangle: -30 }, yaxis: { type: "category", autorange: "reversed" },
    }, { responsive: true, displaylogo: false });
  }
  document.getElementById("embed-button").addEventListener("click", () => ask("embed", form.dataset.embed, {
    sentences: document.getElementById("id_embed_sentences").value.split("\n").filter((s) => s.trim()),
    pooling: document.getElementById("id_embed_pooling").value,
  }, drawEmbed));
})();
