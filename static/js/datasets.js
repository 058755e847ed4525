// The dataset pages: the demo select's description; the mapping form's task help and split
// fractions; on a ready dataset, the label bar chart and the token-length histogram (Plotly),
// measured again through the JSON API when another tokenizer or max_length is chosen.
// The data comes from json_script elements: #demo-descriptions, #task-descriptions,
// #label-counts ({kind, labels, counts: {split: [...]}}), #length-data (the API's `lengths`) and
// #incontext-data / #incontext-reference (the in-context accuracy-against-k chart).
(function () {
  "use strict";
  const SPLITS = ["train", "validation", "test"];
  const COLORS = { train: "#3f5bd9", validation: "#12b76a", test: "#f79009" };
  const CUT = "#b42318";

  function data(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  // ---- the demo select: what the chosen demo is made of -------------------------------------
  const demoSelect = document.getElementById("id_demo");
  const demoHelp = document.getElementById("demo-description");
  const demos = data("demo-descriptions");
  if (demoSelect && demoHelp && demos) {
    const show = () => { demoHelp.textContent = demos[demoSelect.value] || ""; };
    demoSelect.addEventListener("change", show);
    show();
  }

  // ---- the mapping form ----------------------------------------------------------------------
  const mappingForm = document.getElementById("mapping-form");
  const tasks = data("task-descriptions");
  if (mappingForm && tasks) {
    const taskSelect = mappingForm.querySelector("select[name=task]");
    const taskHelp = document.getElementById("task-help");
    const showTask = () => {
      const task = tasks[taskSelect.value];
      taskHelp.textContent = task ? `${task.description} Needs columns mapped to ${task.needs}.` : "";
    };
    taskSelect.addEventListener("change", showTask);
    showTask();

    const fractions = document.getElementById("split-fractions");
    const radios = mappingForm.querySelectorAll("input[name=strategy]");
    const showSplit = () => {
      const chosen = mappingForm.querySelector("input[name=strategy]:checked");
      fractions.hidden = Boolean(chosen) && chosen.value === "column";
    };
    radios.forEach((radio) => radio.addEventListener("change", showSplit));
    showSplit();
  }

  if (typeof Plotly === "undefined") return;
  const CONFIG = { displayModeBar: false, responsive: true };

  // ---- labels per split ----------------------------------------------------------------------
  const labelChart = document.getElementById("label-chart");
  const counts = data("label-counts");
  if (labelChart && counts && counts.labels && counts.labels.length) {
    const unit = labelChart.dataset.unit || "examples";
    const traces = SPLITS.filter((split) => (counts.counts[split] || []).some((n) => n > 0)).map((split) => ({
      type: "bar", name: split, x: counts.labels, y: counts.counts[split], marker: { color: COLORS[split] },
      hovertemplate: `%{x}: %{y:,} ${unit} (${split})<extra></extra>`,
    }));
    Plotly.newPlot(labelChart, traces, {
      barmode: "group", bargap: 0.2, margin: { l: 60, r: 16, t: 10, b: 40 },
      xaxis: { type: "category", automargin: true, title: { text: counts.kind === "bins" ? "score" : "" } },
      yaxis: { title: { text: unit }, rangemode: "tozero" },
      legend: { orientation: "h", x: 1, xanchor: "right", y: 1.02, yanchor: "bottom" },
    }, CONFIG);
  }

  // ---- token lengths -------------------------------------------------------------------------
  const lengthChart = document.getElementById("length-chart");
  const lengthsForm = document.getElementById("lengths-form");
  const summary = document.getElementById("lengths-summary");
  const errorLine = document.getElementById("lengths-error");

  function share(value) {
    return `${(100 * value).toLocaleString(undefined, { maximumFractionDigits: 1 })}%`;
  }

  function describe(lengths) {
    const measured = lengths.sampled ? " measured" : "";
    summary.textContent = "";
    summary.append(Workbench.el("b", "", share(lengths.truncated_share)),
      ` of the ${lengths.examples.toLocaleString()} examples${measured} (${lengths.truncated.toLocaleString()}) ` +
      `are longer than ${lengths.max_length} tokens and would be cut. Median ${lengths.median}, ` +
      `95th percentile ${lengths.p95}, longest ${lengths.longest} tokens.`);
  }

  function drawLengths(lengths) {
    const width = lengths.edges.length > 1 ? lengths.edges[1] - lengths.edges[0] : 1;
    const x = lengths.counts.map((_, i) => lengths.edges[i] + width / 2);
    // A bin is cut when all of it lies beyond max_length, partly cut when max_length falls inside it.
    const colors = lengths.counts.map((_, i) => (lengths.edges[i] > lengths.max_length ? CUT
      : lengths.edges[i + 1] - 1 > lengths.max_length ? COLORS.test : COLORS.train));
    const labels = lengths.counts.map((_, i) => (width === 1 ? `${lengths.edges[i]}`
      : `${lengths.edges[i]}–${lengths.edges[i + 1] - 1}`));
    lengthChart.hidden = false;
    Plotly.react(lengthChart, [{
      type: "bar", x, y: lengths.counts, width: width * 0.95, marker: { color: colors }, customdata: labels,
      hovertemplate: "%{customdata} tokens: %{y:,} examples<extra></extra>",
    }], {
      margin: { l: 60, r: 16, t: 24, b: 48 }, showlegend: false,
      xaxis: { title: { text: "tokens per example" }, rangemode: "tozero" },
      yaxis: { title: { text: "examples" }, rangemode: "tozero" },
      shapes: [{ type: "line", xref: "x", yref: "paper", x0: lengths.max_length + 0.5, x1: lengths.max_length + 0.5,
        y0: 0, y1: 1, line: { color: CUT, width: 2, dash: "dash" } }],
      annotations: [{ xref: "x", yref: "paper", x: lengths.max_length + 0.5, y: 1, yanchor: "bottom",
        text: `max_length ${lengths.max_length}`, showarrow: false, font: { color: CUT } }],
    }, CONFIG);
  }

  const initial = data("length-data");
  if (lengthChart && initial) drawLengths(initial);

  if (lengthsForm) {
    const button = document.getElementById("lengths-submit");
    lengthsForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const query = new URLSearchParams(new FormData(lengthsForm));
      button.disabled = true;
      errorLine.hidden = true;
      try {
        let response;
        try {
          response = await fetch(`${lengthsForm.dataset.api}?${query}`,
            { credentials: "same-origin", headers: { Accept: "application/json" } });
        } catch (e) {
          throw new Error(Workbench.UNREACHABLE);
        }
        const body = await response.json().catch(() => null);
        if (!response.ok) {
          throw new Error((body && body.error) || `The token lengths could not be measured (HTTP ${response.status}).`);
        }
        drawLengths(body.lengths);
        describe(body.lengths);
        history.replaceState(null, "", `?${query}#lengths`);
      } catch (error) {
        errorLine.textContent = error.message;
        errorLine.hidden = false;
      } finally {
        button.disabled = false;
      }
    });
  }
  // ---- zero-, one- and few-shot: accuracy against k, one line per saved evaluation ------------
  // #incontext-data is the leaderboard's `incontext` list, #incontext-reference the best test
  // accuracy of the fine-tuning runs (null without one), drawn as a dashed horizontal line.
  const incontextChart = document.getElementById("incontext-chart");
  const evaluations = data("incontext-data");
  if (incontextChart && evaluations && evaluations.length) {
    const reference = data("incontext-reference");
    const traces = evaluations.map((e) => ({
      type: "scatter", mode: "lines+markers", x: e.k, y: e.accuracy,
      name: `${e.checkpoint} (seed ${e.seed}, ${e.n_queries} examples)`,
      hovertemplate: `k = %{x}: %{y:.1%}<extra>${e.checkpoint}</extra>`,
    }));
    const kMax = Math.max(...evaluations.map((e) => e.k_max), 1);
    if (typeof reference === "number") {
      traces.push({ type: "scatter", mode: "lines", x: [0, kMax], y: [reference, reference], name: "best fine-tuned (test)",
        line: { dash: "dash", color: CUT }, hovertemplate: "fine-tuned: %{y:.1%}<extra></extra>" });
    }
    Plotly.newPlot(incontextChart, traces, {
      xaxis: { title: "demonstrations (k)", dtick: 1, range: [-0.2, kMax + 0.2] },
      yaxis: { title: "accuracy", tickformat: ".0%", range: [0, 1.02] },
      margin: { t: 10 }, height: 300, legend: { orientation: "h", y: -0.25 },
    }, CONFIG);
  }
})();
