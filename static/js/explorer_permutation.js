// Explorer: XLNet's fill-in by permutation. "Show tokens" asks POST /api/explore/permutation/ for
// the text's tokens; clicking tokens builds the prediction order (click again to take one out);
// "Predict in this order" asks for the steps and lists each one's top tokens.
(function () {
  "use strict";
  const form = document.getElementById("explore-form");
  const tokensButton = document.getElementById("permutation-tokens-button");
  if (!form || !tokensButton) return;
  const { el, postJSON } = Workbench;
  const $ = (id) => document.getElementById(id);
  const select = $("id_checkpoint"), text = $("id_permutation_text"), topK = $("id_permutation_top_k");
  const box = $("permutation-tokens"), predict = $("permutation-button"), clear = $("permutation-clear");
  const orderText = $("permutation-order-text"), result = $("permutation-result");
  const steps = $("permutation-steps"), filled = $("permutation-filled");
  const error = form.querySelector('[data-error="permutation"]');
  const pct = (v) => (100 * v).toFixed(1) + "%";
  let tokens = [], order = [];

  function drawTokens() {
    box.replaceChildren();
    tokens.forEach((token, i) => {
      const rank = order.indexOf(i);
      const chip = el("button", "permutation-token" + (rank >= 0 ? " picked" : ""), token);
      chip.type = "button";
      chip.dataset.position = String(i);
      chip.setAttribute("aria-pressed", rank >= 0 ? "true" : "false");
      if (rank >= 0) chip.prepend(el("sup", "permutation-rank", String(rank + 1)));
      chip.addEventListener("click", () => {
        order = rank >= 0 ? order.filter((p) => p !== i) : [...order, i];
        drawTokens();
      });
      box.appendChild(chip);
    });
    predict.disabled = clear.disabled = order.length === 0;
    orderText.textContent = order.length
      ? "Order: " + order.map((p, k) => `${k + 1}. “${tokens[p]}” (position ${p})`).join(", ")
      : tokens.length ? "Click the tokens to predict, in order." : "";
  }

  async function ask(body) {
    error.textContent = "";
    try {
      return await postJSON(Workbench.explorerTools().permutation.url, { checkpoint: select.value, text: text.value, ...body });
    } catch (e) {
      error.textContent = e.message || Workbench.UNREACHABLE;
      return null;
    }
  }

  tokensButton.addEventListener("click", async () => {
    tokensButton.disabled = true;
    const data = await ask({});
    tokensButton.disabled = false;
    if (!data) return;
    tokens = data.tokens;
    order = [];
    result.hidden = true;
    drawTokens();
  });

  clear.addEventListener("click", () => { order = []; drawTokens(); });

  predict.addEventListener("click", async () => {
    predict.disabled = true;
    const data = await ask({ order, top_k: Number(topK.value) || 5 });
    predict.disabled = order.length === 0;
    if (!data) return;
    steps.replaceChildren();
    for (const step of data.steps) {
      const item = el("li", "permutation-step");
      item.appendChild(el("strong", "", `Position ${step.position}`));
      item.appendChild(el("span", "helptext", ` (the text has “${step.original}”) → `));
      item.appendChild(el("span", "permutation-chosen", step.chosen));
      const list = el("ul", "permutation-predictions");
      for (const p of step.predictions) list.appendChild(el("li", "", `${p.token} ${pct(p.prob)}`));
      item.appendChild(list);
      steps.appendChild(item);
    }
    filled.textContent = data.text;
    result.hidden = false;
  });

  // Another checkpoint or text: the order belongs to the old tokens.
  for (const node of [select, text]) node.addEventListener("change", () => {
    tokens = []; order = []; result.hidden = true; drawTokens();
  });
})();
