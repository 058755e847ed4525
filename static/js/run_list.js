// Run list: while some run is queued or running, refresh statuses and progress every few seconds.
(function () {
  "use strict";
  const table = document.getElementById("runs-table");
  if (!table || table.dataset.active !== "1") return;
  const ACTIVE = new Set(["queued", "running"]);
  let delay = 3000;

  async function refresh() {
    let runs;
    try {
      const response = await fetch(table.dataset.api, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error(response.status);
      runs = await response.json();
      delay = 3000;
    } catch (e) {
      delay = Math.min(delay * 2, 60000);
      setTimeout(refresh, delay);
      return;
    }
    let active = false;
    for (const run of runs) {
      const row = table.querySelector(`tr[data-run="${run.id}"]`);
      if (!row) continue;
      const badge = row.querySelector('[data-role="status"]');
      badge.className = `badge ${run.status}`;
      badge.textContent = run.status_label;
      row.querySelector('[data-role="bar"]').style.width = `${(100 * run.progress).toFixed(1)}%`;
      row.querySelector('[data-role="steps"]').textContent =
        `step ${run.current_step.toLocaleString("en-US")}` + (run.max_steps ? ` / ${run.max_steps.toLocaleString("en-US")}` : "");  // 0: a run in epochs, not counted yet
      if (ACTIVE.has(run.status)) active = true;
    }
    if (active) setTimeout(refresh, delay);
  }
  setTimeout(refresh, delay);
})();
