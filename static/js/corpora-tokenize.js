// The tokenizer page's "Try it" box: tokenizes the typed text as you type
// (POST /api/tokenizers/<id>/tokenize/) and shows each token as a chip with its id.
(function () {
  "use strict";
  var input = document.getElementById("tokenize-input");
  if (!input) return;
  var output = document.getElementById("tokenize-output");
  var summary = document.getElementById("tokenize-summary");
  var el = Workbench.el;
  var timer = null;
  var controller = null;

  function render(tokens) {
    output.textContent = "";
    tokens.forEach(function (t) {
      var special = /^\[[A-Z]+\]$/.test(t.token);
      var chip = el("span", "chip" + (special ? " special" : "") + (t.token.indexOf("##") === 0 ? " piece" : "") +
        (t.token === "[UNK]" ? " unk" : ""));
      chip.title = "id " + t.id;
      chip.appendChild(el("span", "", t.token));
      chip.appendChild(el("sub", "", String(t.id)));
      output.appendChild(chip);
    });
    var words = input.value.trim() ? input.value.trim().split(/\s+/).length : 0;
    var unk = tokens.filter(function (t) { return t.token === "[UNK]"; }).length;
    summary.textContent = tokens.length + " token" + (tokens.length === 1 ? "" : "s") + " for " + words +
      " word" + (words === 1 ? "" : "s") + (unk ? " · " + unk + " unknown" : "") + ".";
    summary.classList.remove("error");
  }

  function tokenize() {
    if (controller) controller.abort();
    controller = "AbortController" in window ? new AbortController() : null;
    Workbench.postJSON(input.dataset.url, { text: input.value }, { signal: controller ? controller.signal : undefined })
      .then(function (body) { render(body.tokens || []); })
      .catch(function (err) {
        if (err && err.name === "AbortError") return;
        summary.textContent = err.message;
        summary.classList.add("error");
      });
  }

  input.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(tokenize, 200);
  });
  tokenize();
})();
