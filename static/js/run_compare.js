// Compare runs: the chosen metric's curve of every run, overlaid on one Plotly chart.
(function () {
  "use strict";
  const dataEl = document.getElementById("compare-data");
  const select = document.getElementById("compare-metric");
  if (!dataEl || !select || typeof Plotly === "undefined") return;
  const metrics = JSON.parse(dataEl.textContent);
  const COLORS = ["#3f5bd9", "#e0692b", "#2a9d5b", "#8e44ad", "#c0392b", "#7f8c8d"];
  const FEW_POINTS = 3;

  // Said when the runs' tokenizers differ (the server's sentence), while a per-token metric is drawn.
  const note = document.getElementById("compare-tokenizer-note");

  function draw() {
    const m = metrics[Number(select.value)];
    if (!m) return;
    if (note) note.hidden = !m.per_token;
    const traces = m.curves.map((c, i) => ({
      x: c.steps, y: c.values, name: c.name, type: "scatter",
      // a validation curve, or one of a few points, gets markers (one point has no line to draw)
      mode: m.split === "valid" || c.steps.length <= FEW_POINTS ? "lines+markers" : "lines",
      line: { color: COLORS[i % COLORS.length], width: 2 }, marker: { size: 5 },
    }));
    const head = Workbench.chartHead(`${m.label} (${m.split === "valid" ? "validation" : "training"})`);
    Plotly.react("compare-chart", traces, {
      title: head.title, legend: head.legend,
      margin: { l: 56, r: 16, ...head.margin }, hovermode: "x unified",
      xaxis: { title: { text: "step", font: { size: 11 } }, rangemode: "tozero" },
    }, { responsive: true, displaylogo: false });
  }
  // Prefer the first validation metric that is not the loss (a task's metric) when there is one.
  const preferred = metrics.findIndex((m) => m.split === "valid" && m.metric !== "loss");
  if (preferred >= 0) select.value = String(preferred);
  select.addEventListener("change", draw);
  draw();
}());
