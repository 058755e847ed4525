// Explorer: the prompt builder (GPT-3's in-context learning). POST /api/explore/prompt-builder/
// shows the exact prompt and each label's score; /api/explore/incontext-accuracy/ charts
// accuracy against k (saved by the server; the link goes to the dataset's page, which charts every
// saved one). Both read the checkpoint chosen at the top of the page.
(function () {
  "use strict";
  const panel = document.getElementById("prompt-builder");
  const build = document.getElementById("icl-build");
  if (!panel || !build) return;
  const { el, postJSON } = Workbench;
  const $ = (id) => document.getElementById(id);
  const error = panel.querySelector('[data-error="prompt_builder"]');

  function settings() {
    return {
      checkpoint: $("id_checkpoint").value, dataset: $("icl-dataset").value, template: $("icl-template").value,
      seed: Number($("icl-seed").value) || 0, normalise: $("icl-normalise").checked,
    };
  }

  async function run(button, url, body, show) {
    error.textContent = "";
    button.disabled = true;
    try {
      show(await postJSON(url, body));
    } catch (e) {
      error.textContent = e.message;
    } finally {
      button.disabled = false;
    }
  }

  // The buttons submit the page's form (answered by the server without JavaScript); here the API answers.
  const asked = (handler) => (event) => { event.preventDefault(); handler(); };
  build.addEventListener("click", asked(() => run(build, Workbench.explorerTools().prompt_builder.url,
    { ...settings(), k: Number($("icl-k").value) || 0, index: Number($("icl-index").value) || 0 }, (data) => {
      panel.querySelector("[data-icl-prompt]").textContent = data.prompt;
      const rows = panel.querySelector("[data-icl-scores]");
      rows.replaceChildren(...data.scores.map((s) => {
        const tr = el("tr", s.label === data.predicted ? "is-best" : "");
        tr.append(el("td", "", s.label), el("td", "", s.tokens.join(" ")), el("td", "", s.logprob.toFixed(3)),
          el("td", "", s.score.toFixed(3)));
        return tr;
      }));
      panel.querySelector("[data-icl-verdict]").textContent =
        `Predicted "${data.predicted}"; the dataset says "${data.gold}" (${data.predicted === data.gold ? "right" : "wrong"}).`;
      $("icl-result").hidden = false;
    })));

  const accuracy = $("icl-accuracy");
  accuracy.addEventListener("click", asked(() => run(accuracy, Workbench.explorerTools().incontext_accuracy.url,
    { ...settings(), k_max: Number($("icl-kmax").value) || 0, n_queries: Number($("icl-queries").value) || 1 }, (data) => {
      const rows = panel.querySelector("[data-icl-accuracy]");
      rows.replaceChildren(...data.k.map((k, i) => {
        const tr = el("tr");
        tr.append(el("td", "", String(k)), el("td", "", `${(100 * data.accuracy[i]).toFixed(1)}%`));
        return tr;
      }));
      panel.querySelector("[data-icl-saved-link]").href =
        `${panel.dataset.datasetPage.replace("00000000-0000-0000-0000-000000000000", data.dataset)}#incontext`;
      $("icl-accuracy-result").hidden = false;
      if (window.Plotly) {
        window.Plotly.newPlot("icl-accuracy-chart", [{ x: data.k, y: data.accuracy, mode: "lines+markers" }], {
          xaxis: { title: "demonstrations (k)", dtick: 1 }, yaxis: { title: "accuracy", tickformat: ".0%", range: [0, 1] },
          margin: { t: 10 }, height: 260,
        }, { displayModeBar: false, responsive: true });
      }
    })));
})();
