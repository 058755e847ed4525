// Explorer: the attention viewer. Asks POST /api/explore/attention/ for one layer at a time
// (kept, so going back to a layer costs nothing) and draws the chosen head as a Plotly heatmap:
// rows are the query tokens, columns the tokens they attend to.
(function () {
  "use strict";
  const form = document.getElementById("explore-form");
  const button = document.getElementById("attention-button");
  if (!form || !button) return;
  const select = document.getElementById("id_checkpoint");
  const $ = (id) => document.getElementById(id);
  const layerSelect = $("id_attention_layer"), headSelect = $("id_attention_head");
  const stackSelect = $("id_attention_stack"), streamSelect = $("id_attention_stream");
  const chart = $("attention-chart"), result = $("attention-result"), caption = $("attention-caption");
  const error = form.querySelector('[data-error="attention"]');
  const STACKS = { encoder: "encoder self-attention", decoder: "decoder self-attention (causal)",
                   cross: "decoder cross-attention (rows: decoder tokens, columns: encoder tokens)",
                   content: "XLNet content stream", query: "XLNet query stream (each position as a target)" };

  // What was asked (the request without the layer) and the layers already fetched for it.
  let question = null, shape = null;
  const layers = new Map();

  function request() {
    const kind = form.dataset.kind || "encoder";
    const body = { checkpoint: select.value, text: $("id_attention_text").value };
    if (kind === "t5") {
      body.stack = stackSelect.value;
      const target = $("id_attention_target").value.trim();
      if (target && body.stack !== "encoder") body.target = target;
    }
    if (kind === "xlnet") body.stack = streamSelect.value;
    return body;
  }

  async function fetchLayer(layer) {
    if (layers.has(layer)) return layers.get(layer);
    const data = await Workbench.postJSON(Workbench.explorerTools().attention.url, { ...question, layer });
    // Later layers of a T5 decoder read the same target, even when the model chose it.
    if (data.target && !question.target) question.target = data.target;
    layers.set(layer, data);
    return data;
  }

  function options(selectNode, n, label) {
    selectNode.replaceChildren();
    for (let i = 0; i < n; i++) {
      const option = document.createElement("option");
      option.value = String(i);
      option.textContent = `${label} ${i}`;
      selectNode.appendChild(option);
    }
    selectNode.disabled = n === 0;
  }

  function draw(data, head) {
    const z = data.maps[0][head];
    const rows = data.tokens, cols = data.key_tokens;
    const text = rows.map((q) => cols.map((k) => `${q} → ${k}`));
    result.hidden = false;
    caption.textContent = `${STACKS[data.stack]}, layer ${data.layer}, head ${head}` +
      (data.target !== null && data.target !== undefined ? ` · decoder reads “${data.target}”` : "") +
      `. ${data.layers} layers × ${data.heads} heads.`;
    const ticks = (tokens) => ({ tickvals: tokens.map((_, i) => i), ticktext: tokens, tickfont: { family: "ui-monospace, monospace", size: 11 } });
    // Positions, not the token strings, on the axes: a repeated token would merge its rows otherwise.
    Plotly.react(chart, [{
      type: "heatmap", z, x: cols.map((_, i) => i), y: rows.map((_, i) => i), text,
      hovertemplate: "%{text}: %{z:.3f}<extra></extra>", colorscale: "Blues", zmin: 0, zmax: 1,
    }], {
      height: Math.max(320, Math.min(900, 140 + 18 * rows.length)),
      margin: { l: 90, r: 20, t: 10, b: 90 },
      xaxis: { ...ticks(cols), tickangle: -60, side: "bottom" },
      yaxis: { ...ticks(rows), autorange: "reversed" },
    }, { displayModeBar: false, responsive: true });
  }

  async function show(layer, head) {
    error.textContent = "";
    try {
      const data = await fetchLayer(layer);
      draw(data, Math.min(head, data.heads - 1));
    } catch (e) {
      error.textContent = e.message || Workbench.UNREACHABLE;
      result.hidden = true;
    }
  }

  button.addEventListener("click", async () => {
    button.disabled = true;
    question = request();
    layers.clear();
    error.textContent = "";
    try {
      const first = await fetchLayer(0);
      if (!shape || shape.layers !== first.layers || shape.heads !== first.heads) {
        options(layerSelect, first.layers, "layer");
        options(headSelect, first.heads, "head");
        shape = { layers: first.layers, heads: first.heads };
      }
      const layer = Number(layerSelect.value || 0), head = Number(headSelect.value || 0);
      await show(layer, head);
    } catch (e) {
      error.textContent = e.message || Workbench.UNREACHABLE;
      result.hidden = true;
    } finally {
      button.disabled = false;
    }
  });
  layerSelect.addEventListener("change", () => { if (question) show(Number(layerSelect.value), Number(headSelect.value)); });
  headSelect.addEventListener("change", () => { if (question) show(Number(layerSelect.value), Number(headSelect.value)); });
  // A new checkpoint or stack is a new question: the old heatmap would mislead.
  for (const node of [select, stackSelect, streamSelect]) if (node) node.addEventListener("change", () => {
    question = null; shape = null; layers.clear(); result.hidden = true;
    options(layerSelect, 0, "layer"); options(headSelect, 0, "head");
  });
})();
