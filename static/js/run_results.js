// A fine-tuning run's confusion matrix (test split) as a Plotly heatmap: rows are the true labels,
// columns the predicted ones, each cell's colour its share of the row and its text the count.
(function () {
  "use strict";
  const dataEl = document.getElementById("confusion-data");
  const target = document.getElementById("confusion-matrix");
  if (!dataEl || !target || typeof Plotly === "undefined") return;
  const data = JSON.parse(dataEl.textContent);
  if (!data || !data.labels || !data.matrix) return;
  const labels = data.labels.map(String);
  const shares = data.matrix.map((row) => {
    const total = row.reduce((a, b) => a + b, 0);
    return row.map((n) => (total ? n / total : 0));
  });
  const trace = {
    type: "heatmap", x: labels, y: labels, z: shares, zmin: 0, zmax: 1,
    text: data.matrix.map((row) => row.map(String)), texttemplate: "%{text}",
    colorscale: "Blues", reversescale: true, showscale: true, colorbar: { tickformat: ".0%", thickness: 12 },
    hovertemplate: "true %{y}<br>predicted %{x}<br>%{text} (%{z:.0%} of the row)<extra></extra>",
  };
  const size = Math.min(720, 160 + 36 * labels.length);
  target.style.height = `${size}px`;  // the box grows with the chart, never under the table that follows
  Plotly.react(target, [trace], {
    height: size, margin: { l: 110, r: 16, t: 16, b: 110 },
    xaxis: { title: { text: "predicted" }, type: "category", tickangle: -40 },
    yaxis: { title: { text: "true" }, type: "category", autorange: "reversed" },
  }, { responsive: true, displaylogo: false });
}());
