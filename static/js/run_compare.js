// Compare runs: the chosen metric's curve of every run, overlaid on one Plotly chart.
(function () {
  "use strict";
  const dataEl = document.getElementById("compare-data");
  const select = document.getElementById("compare-metric");
  if (!dataEl || !select || typeof Plotly === "undefined") return;
  const metrics = JSON.parse(dataEl.textContent);
  const COLORS = ["#3f5bd9", "#e0692b", "#2a9d5b", "#8e44ad", "#c0392b", "#7f8c8d"];

  function draw() {
    const m = metrics[Number(select.value)];
    if (!m) return;
    const traces = m.curves.map((c, i) => ({
      x: c.steps, y: c.values, name: c.name, type: "scatter",
      mode: m.split === "valid" ? "lines+markers" : "lines",
      line: { color: COLORS[i % COLORS.length], width: 2 }, marker: { size: 5 },
    }));
    Plotly.react("compare-chart", traces, {
      title: { text: `${m.metric} (${m.split === "valid" ? "validation" : "training"})`, font: { size: 14 }, x: 0.02 },
      margin: { l: 56, r: 16, t: 36, b: 40 }, hovermode: "x unified",
      xaxis: { title: { text: "step", font: { size: 11 } }, rangemode: "tozero" },
      legend: { orientation: "h", x: 1, xanchor: "right", y: 1.12 },
    }, { responsive: true, displaylogo: false });
  }
  // Prefer the first validation metric that is not the loss (a task's metric) when there is one.
  const preferred = metrics.findIndex((m) => m.split === "valid" && m.metric !== "loss");
  if (preferred >= 0) select.value = String(preferred);
  select.addEventListener("change", draw);
  draw();
}());
