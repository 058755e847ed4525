// The tokenizer page's "Try it" box: tokenizes the typed text as you type
// (POST /api/tokenizers/<id>/tokenize/) and shows each token as a chip with its id.
(function () {
  "use strict";
  var input = document.getElementById("tokenize-input");
  if (!input) return;
  var output = document.getElementById("tokenize-output");
  var summary = document.getElementById("tokenize-summary");
  var csrf = document.querySelector("input[name=csrfmiddlewaretoken]");
  var timer = null;
  var controller = null;

  function render(tokens) {
    output.textContent = "";
    tokens.forEach(function (t) {
      var chip = document.createElement("span");
      var special = /^\[[A-Z]+\]$/.test(t.token);
      chip.className = "chip" + (special ? " special" : "") + (t.token.indexOf("##") === 0 ? " piece" : "") +
        (t.token === "[UNK]" ? " unk" : "");
      chip.title = "id " + t.id;
      var text = document.createElement("span");
      text.textContent = t.token;
      var id = document.createElement("sub");
      id.textContent = t.id;
      chip.appendChild(text);
      chip.appendChild(id);
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
    fetch(input.dataset.url, {
      method: "POST",
      credentials: "same-origin",
      signal: controller ? controller.signal : undefined,
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf ? csrf.value : "" },
      body: JSON.stringify({ text: input.value }),
    })
      .then(function (r) {
        return r.json().then(function (body) { return { ok: r.ok, body: body }; });
      })
      .then(function (res) {
        if (res.ok) render(res.body.tokens || []);
        else {
          summary.textContent = res.body.error || "The text could not be tokenized.";
          summary.classList.add("error");
        }
      })
      .catch(function (err) {
        if (err && err.name === "AbortError") return;
        summary.textContent = "The server did not answer; try again in a moment.";
        summary.classList.add("error");
      });
  }

  input.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(tokenize, 200);
  });
  tokenize();
})();
