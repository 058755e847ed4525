// Sweep page: the trials table and two Plotly charts (parallel coordinates of the settings and
// the metric; the metric against each setting), refreshed from the API while the sweep runs.
(function () {
  "use strict";
  const box = document.getElementById("sweep");
  if (!box) return;
  const { el } = window.Workbench;
  const table = document.getElementById("trials-table");
  let delay = 3000;

  function fmt(v) {
    if (v === null || v === undefined) return "—";
    return typeof v === "number" ? Number(v.toPrecision(4)).toString() : String(v);
  }

  function renderTable(sweep) {
    const names = sweep.space.map((e) => e.name);
    const body = table.tBodies[0];
    body.replaceChildren();
    for (const t of sweep.trials) {
      const row = el("tr");
      row.dataset.trial = t.number;
      if (t.number === sweep.best_trial) row.className = "best";
      row.append(el("td", "", String(t.number)));
      const state = el("td");
      const badge = el("span", `badge ${t.state}`, t.state.charAt(0).toUpperCase() + t.state.slice(1));
      badge.dataset.role = "state";
      state.append(badge);
      row.append(state);
      for (const n of names) row.append(el("td", "", fmt(t.params[n])));
      const value = el("td", "", t.value !== null ? fmt(t.value) : (t.last_value !== null ? `(${fmt(t.last_value)})` : "—"));
      value.dataset.role = "value";
      row.append(value);
      const run = el("td");
      if (t.run_url) {
        const a = el("a", "", t.run_status.charAt(0).toUpperCase() + t.run_status.slice(1));
        a.href = t.run_url;
        run.append(a, el("span", "muted small", ` step ${t.step}` + (t.max_steps ? ` / ${t.max_steps}` : "")));
      } else run.append(el("span", "muted", "deleted"));
      row.append(run, el("td", "small", t.note || ""));
      body.append(row);
    }
    const best = document.getElementById("sweep-best");
    if (sweep.best_trial !== null) {
      best.replaceChildren(`Best: trial ${sweep.best_trial}, ${sweep.metric} ${fmt(sweep.best_value)}. `);
      if (sweep.best_checkpoint) {
        const a = el("a", "button", "Open its checkpoint in the explorer");
        a.id = "best-explore";
        a.href = sweep.best_checkpoint.explore_url;
        best.append(a);
      }
    }
    const status = document.getElementById("sweep-status");
    status.className = `badge ${sweep.status}`;
    status.textContent = sweep.status_label;
  }

  function dimension(entry, values) {
    if ("values" in entry && entry.values.some((v) => typeof v !== "number")) {
      const labels = entry.values.map(String);
      return { label: entry.name, values: values.map((v) => labels.indexOf(String(v))),
               tickvals: labels.map((_, i) => i), ticktext: labels };
    }
    if (entry.log) {  // parcoords has no log axis: plot log10 and label the ticks with the values
      const logs = values.map((v) => Math.log10(v));
      return { label: `${entry.name} (log)`, values: logs, tickvals: logs, ticktext: values.map(fmt) };
    }
    return { label: entry.name, values };
  }

  function renderCharts(sweep) {
    if (!window.Plotly) return;
    const done = sweep.trials.filter((t) => t.state === "complete" && t.value !== null);
    document.getElementById("charts-empty").hidden = done.length > 0;
    if (!done.length) return;
    const metric = done.map((t) => t.value);
    const dims = sweep.space.map((e) => dimension(e, done.map((t) => t.params[e.name])));
    dims.push({ label: sweep.metric, values: metric });
    Plotly.react("sweep-parcoords", [{
      type: "parcoords", dimensions: dims,
      line: { color: metric, colorscale: "Viridis", reversescale: sweep.direction === "minimize", showscale: true },
    }], { margin: { l: 60, r: 60, t: 40, b: 20 }, height: 320 }, { displaylogo: false, responsive: true });

    const n = sweep.space.length;
    const traces = [];
    const layout = { grid: { rows: 1, columns: n, pattern: "independent" }, height: 300, showlegend: false,
                     margin: { l: 60, r: 20, t: 30, b: 50 } };
    sweep.space.forEach((e, i) => {
      const axis = i === 0 ? "" : String(i + 1);
      traces.push({
        type: "scatter", mode: "markers", x: done.map((t) => t.params[e.name]), y: metric,
        text: done.map((t) => `trial ${t.number}`), xaxis: `x${axis}`, yaxis: `y${axis}`, name: e.name,
        marker: { size: 9, color: done.map((t) => (t.number === sweep.best_trial ? "#d62728" : "#1f77b4")) },
      });
      layout[`xaxis${axis}`] = { title: { text: e.name }, type: e.log ? "log" : ("values" in e && e.values.some((v) => typeof v !== "number") ? "category" : "linear") };
      layout[`yaxis${axis}`] = { title: { text: i === 0 ? sweep.metric : "" } };
    });
    Plotly.react("sweep-scatter", traces, layout, { displaylogo: false, responsive: true });
  }

  async function refresh() {
    let sweep;
    try {
      const response = await fetch(box.dataset.api, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error(response.status);
      sweep = await response.json();
      delay = 3000;
    } catch (e) {
      delay = Math.min(delay * 2, 60000);
      setTimeout(refresh, delay);
      return;
    }
    renderTable(sweep);
    renderCharts(sweep);
    if (sweep.status === "running") setTimeout(refresh, delay);
  }
  refresh();
})();
