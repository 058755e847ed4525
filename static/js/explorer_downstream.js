// Explorer tools for fine-tuned checkpoints (classify, choose, tag, answer) and any encoder (sentence
// embeddings, nearest neighbours in a dataset): ask /api/explore/classify|choose|tag|answer|embed|neighbours/
// and draw the answers in place. Each panel's button submits the page's form; without JavaScript
// the server answers it and the template draws the same answers.
// Which panels show follows the chosen checkpoint: a panel's data-tool is the tool it is (the
// option's data-tool: what its fine-tuning task declares); explorer.js hides the pre-training panels
// (data-pretrained: fill-mask, sentence pairs) of a fine-tuned model, which its task head cannot answer.
(function () {
  "use strict";
  const form = document.getElementById("explore-form");
  const select = document.getElementById("id_checkpoint");
  if (!form || !select) return;
  const TOOLS = Workbench.explorerTools(); // endpoints, compare tasks
  const { el, postJSON } = Workbench;
  const pct = (v) => (100 * v).toFixed(1) + "%";
  const count = (n) => Number(n).toLocaleString("en-US"); // as the server writes them: "14,269"
  const COLORS = ["#3f5bd9", "#e0692b", "#2a9d5b", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d35400"];

  function onCheckpoint() {
    const opt = select.selectedOptions[0];
    const task = opt ? opt.dataset.task || "" : "";
    const tool = opt ? opt.dataset.tool || "" : "";
    form.dataset.task = task;
    for (const node of form.querySelectorAll("[data-tool]")) {
      node.hidden = !tool || node.dataset.tool !== tool;
    }
  }
  select.addEventListener("change", onCheckpoint);
  onCheckpoint();

  // panel: whose error line and result box (a button's action names them, but for neighbours_index).
  async function ask(action, url, body, draw, panel = action) {
    const button = document.querySelector(`button[name="action"][value="${action}"]`);
    const error = form.querySelector(`[data-error="${panel}"]`);
    const box = document.getElementById(`${panel}-result`);
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
        checkpoints: [select.value, compare.value], task: TOOLS.classify.compare, inputs });
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
  function classifyAction() {
    const inputs = { text: document.getElementById("id_classify_text").value,
                     text_b: document.getElementById("id_classify_text_b").value };
    if (compare && compare.value) return classifyBoth(inputs);
    return ask("classify", TOOLS.classify.url, inputs, drawClassify);
  }

  // ---- choose (GPT-1 multiple choice): the classify bars, one per choice ----------------------------
  function drawChoose(box, data) {
    drawClassify(box, { problem_type: "single_label_classification", labels: data.labels,
                        predicted: data.predicted, truncated: data.truncated, max_length: data.max_length });
  }
  function chooseAction() {
    return ask("choose", TOOLS.choose.url, {
      context: document.getElementById("id_choose_context").value,
      choices: document.getElementById("id_choose_choices").value.split("\n").map((c) => c.trim()).filter(Boolean),
    }, drawChoose);
  }

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
  const tagAction = () => ask("tag", TOOLS.tag.url, { text: document.getElementById("id_tag_text").value }, drawTag);

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
  const answerAction = () => ask("answer", TOOLS.answer.url, {
    question: document.getElementById("id_qa_question").value,
    context: document.getElementById("id_qa_context").value,
    n_best: Number(document.getElementById("id_qa_n_best").value || 5),
  }, drawAnswer);

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
  const embedAction = () => ask("embed", TOOLS.embed.url, {
    sentences: document.getElementById("id_embed_sentences").value.split("\n").filter((s) => s.trim()),
    pooling: document.getElementById("id_embed_pooling").value,
  }, (box, data) => {
    const table = box.querySelector("[data-similarity]");
    if (table) table.remove(); // the server's table, from a post without JavaScript
    drawEmbed(box, data);
  });

  // ---- nearest neighbours in a dataset -----------------------------------------------------------
  // "Embed the dataset" starts (or finds) the job and follows its progress; "Find neighbours" asks.
  const statusBox = document.getElementById("neighbours-status");
  const renderedFor = select.value;
  let polling = null;
  function indexLine(index) {
    let line = statusBox.querySelector(`[data-index="${index.id}"]`);
    if (!line) {
      line = el("div", "explorer-index");
      line.dataset.index = index.id;
      statusBox.prepend(line);
    }
    line.dataset.status = index.status;
    // the space the server's template has between the name and the status ("mean pooling: ready")
    line.replaceChildren(el("span", "", `${index.dataset_name}, ${index.pooling} pooling:`), " ");
    if (index.status === "pending" || index.status === "processing") {
      const bar = el("div", "progress");
      bar.setAttribute("role", "progressbar");
      bar.setAttribute("aria-valuemin", "0");
      bar.setAttribute("aria-valuemax", "100");
      bar.setAttribute("aria-valuenow", String(Math.round(index.progress)));
      const fill = el("div");
      fill.style.width = `${index.progress}%`;
      bar.appendChild(fill);
      line.append(bar, el("span", "muted small", `${index.status_label}, ${Math.round(index.progress)}% embedded.`));
    } else if (index.status === "ready") {
      line.appendChild(el("span", "muted small",
        `ready: ${count(index.count)} of the dataset's ${count(index.total)} texts embedded.`));
    } else {
      line.appendChild(el("span", "error", `failed: ${index.error}`));
    }
  }
  async function follow(index, draw = true) {
    if (draw) indexLine(index);
    if (index.status !== "pending" && index.status !== "processing") return;
    const url = TOOLS.neighbours_index.url + index.id + "/";
    clearTimeout(polling);
    polling = setTimeout(async () => {
      try {
        const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (response.ok) return follow(await response.json());
        if (response.status < 500) return; // gone (deleted with its dataset or checkpoint)
      } catch (e) {
        // the server is busy or unreachable for a moment: try again at the next tick
      }
      follow(index, draw);
    }, 1000);
  }
  const nnInputs = () => ({ dataset: document.getElementById("id_nn_dataset").value,
                            pooling: document.getElementById("id_nn_pooling").value });
  const indexAction = () => ask("neighbours_index", TOOLS.neighbours_index.url, nnInputs(), (box, data) => {
    box.hidden = true;
    follow(data);
  }, "neighbours");
  function drawNeighbours(box, data) {
    box.replaceChildren();
    const table = el("table", "table explorer-neighbours");
    const head = el("tr");
    for (const h of ["#", "Text", "Label", "Split", "Cosine"]) head.appendChild(el("th", "", h));
    table.appendChild(el("thead")).appendChild(head);
    const body = table.appendChild(el("tbody"));
    for (const n of data.neighbours) {
      const row = el("tr");
      row.append(el("td", "", String(n.rank)), el("td", "", n.text), el("td", "", n.label ?? "—"),
                 el("td", "", n.split), el("td", "", n.similarity.toFixed(3)));
      body.appendChild(row);
    }
    box.append(table, el("p", "helptext", `Searched ${count(data.count)} of the ${count(data.total)} texts `
      + `(${data.pooling} pooling).${data.truncated ? " The query was cut to the model's length." : ""}`));
  }
  const neighboursAction = () => ask("neighbours", TOOLS.neighbours.url, {
    ...nnInputs(), text: document.getElementById("id_nn_text").value,
    k: Number(document.getElementById("id_nn_k").value || 5),
  }, drawNeighbours);
  select.addEventListener("change", () => {
    if (statusBox) for (const line of statusBox.children) line.hidden = select.value !== renderedFor;
  });
  if (statusBox) for (const line of statusBox.querySelectorAll('[data-status="pending"], [data-status="processing"]')) {
    follow({ id: line.dataset.index, status: line.dataset.status }, false); // drawn by the server until the first answer
  }

  // ---- asking ------------------------------------------------------------------------------------
  const ACTIONS = { classify: classifyAction, choose: chooseAction, tag: tagAction, answer: answerAction, embed: embedAction,
                    neighbours_index: indexAction, neighbours: neighboursAction };
  form.addEventListener("submit", (event) => {
    const action = event.submitter && event.submitter.value;
    if (!ACTIONS[action]) return;
    event.preventDefault();
    ACTIONS[action]();
  });
})();
