// Explorer: ask the JSON API and draw the answers in place (the form also works without this).
(function () {
  "use strict";
  const form = document.getElementById("explore-form");
  if (!form) return;
  const text = document.getElementById("id_text");
  const select = document.getElementById("id_checkpoint");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;

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
  function onCheckpoint() {
    const url = new URL(location.href);
    url.searchParams.set("checkpoint", select.value);
    history.replaceState(null, "", url);
    const gone = document.getElementById("checkpoint-gone");
    if (gone) gone.hidden = true;
    const opt = select.selectedOptions[0];
    const runLink = document.getElementById("checkpoint-run");
    if (runLink && opt) { runLink.textContent = opt.dataset.runName; runLink.href = opt.dataset.runUrl; }
    const nspButton = form.querySelector('button[value="next_sentence"]');
    const noNsp = opt && opt.dataset.nsp === "0";
    nspButton.disabled = noNsp;
    nspButton.title = noNsp ? "This run was trained without next sentence prediction." : "";
  }
  select.addEventListener("change", onCheckpoint);
  onCheckpoint();

  // ---- drawing --------------------------------------------------------------------------------
  function drawMasks(masks) {
    const box = document.getElementById("fill-mask-results");
    box.replaceChildren();
    masks.forEach((mask, i) => {
      const wrap = document.createElement("div");
      wrap.className = "explorer-mask";
      const h = document.createElement("h3");
      h.textContent = `[MASK] #${i + 1} `;
      const where = document.createElement("span");
      where.className = "muted small";
      where.textContent = `(token ${mask.position})`;
      h.appendChild(where);
      const chart = document.createElement("div");
      chart.className = "explorer-chart";
      wrap.append(h, chart);
      box.appendChild(wrap);
      const preds = mask.predictions.slice().reverse(); // most likely on top
      Plotly.newPlot(chart, [{
        type: "bar", orientation: "h",
        x: preds.map((p) => p.prob), y: preds.map((p, j) => `${p.token}\u200b${"\u200b".repeat(j)}`),
        text: preds.map((p) => (100 * p.prob).toFixed(1) + "%"), textposition: "auto",
        hovertemplate: "%{y}: %{x:.2%}<extra></extra>", marker: { color: "#3f5bd9" },
      }], {
        height: 60 + 26 * preds.length, margin: { l: 110, r: 16, t: 8, b: 30 },
        xaxis: { tickformat: ".0%", range: [0, Math.max(0.05, ...preds.map((p) => p.prob)) * 1.1] },
        yaxis: { automargin: true, tickfont: { family: "ui-monospace, monospace" } },
      }, { displayModeBar: false, responsive: true });
    });
  }

  function drawNsp(result) {
    document.getElementById("next-sentence-result").hidden = false;
    const pct = (v) => (100 * v).toFixed(1) + "%";
    document.getElementById("nsp-bar").style.width = pct(result.is_next);
    document.getElementById("nsp-is-next").textContent = pct(result.is_next);
    document.getElementById("nsp-not-next").textContent = pct(result.not_next);
  }

  const initial = document.getElementById("fill-mask-data");
  if (initial) drawMasks(JSON.parse(initial.textContent));

  // ---- asking -----------------------------------------------------------------------------------
  function showError(action, message) {
    form.querySelector(`[data-error="${action}"]`).textContent = message || "";
  }

  form.addEventListener("submit", async (event) => {
    const action = event.submitter && event.submitter.value;
    if (!action) return;
    event.preventDefault();
    const body = action === "fill_mask"
      ? { checkpoint: select.value, text: text.value, top_k: Number(document.getElementById("id_top_k").value || 5) }
      : { checkpoint: select.value, text_a: document.getElementById("id_text_a").value,
          text_b: document.getElementById("id_text_b").value };
    const button = event.submitter;
    button.disabled = true;
    showError(action, "");
    try {
      const response = await fetch(form.dataset[action === "fill_mask" ? "fillMask" : "nextSentence"], {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify(body),
      });
      const data = await response.json().catch(() => ({}));
      if (!response.ok) {
        showError(action, data.error || `The request failed (HTTP ${response.status}).`);
        if (action === "fill_mask") document.getElementById("fill-mask-results").replaceChildren();
        else document.getElementById("next-sentence-result").hidden = true;
        return;
      }
      if (action === "fill_mask") drawMasks(data.masks); else drawNsp(data);
    } catch (e) {
      showError(action, "Could not reach the server. Check your connection and try again.");
    } finally {
      button.disabled = false;
      if (action === "next_sentence") onCheckpoint();
    }
  });
})();
