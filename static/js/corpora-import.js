// The upload page's "Import from the server" form. "Find files" asks the API for the files the path
// names (POST /api/corpora/import/ with "dry_run": true) and shows them in a table with their
// format, compression and size; then "Import N files (X GB)" posts the form itself, which creates
// the corpus and opens its page. A refused path is said beside the field, in the API's sentence.
// Changing the path or the text field hides the import button until the files are found again.
// Without JavaScript the same buttons post the form, and the page lists the files itself.
(function () {
  "use strict";
  var form = document.getElementById("import-form");
  if (!form || !window.Workbench) return;
  var fieldset = form.querySelector("fieldset");
  if (fieldset && fieldset.disabled) return; // importing is off: the page says why

  var find = document.getElementById("import-find");
  var submit = document.getElementById("import-submit");
  var listing = document.getElementById("import-listing");
  var errorBox = document.getElementById("import-error");
  var prefix = "import-";
  var SHOWN = 20;
  var FORMATS = { txt: "text", jsonl: "JSON lines", parquet: "Parquet", arrow: "Arrow" };
  var COMPRESSIONS = { none: "—", gzip: "gzip", zstd: "zstd", bz2: "bzip2" };
  var el = Workbench.el;
  var listedFor = listing.dataset.listedPath ? key() : null; // the page listed the files itself (no script)

  function input(name) { return form.querySelector("[name='" + prefix + name + "']"); }

  function key() {
    return JSON.stringify([input("path").value.trim(), input("text_field").value.trim()]);
  }

  function bytes(n) {
    var units = ["bytes", "KB", "MB", "GB"];
    var i = 0;
    while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
    return i === 0 ? n.toLocaleString("en-US") + " bytes"
      : n.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 }) + " " + units[i];
  }

  function plural(n, word) { return n.toLocaleString("en-US") + " " + word + (n === 1 ? "" : "s"); }

  function clearErrors() {
    errorBox.hidden = true;
    errorBox.textContent = "";
    form.querySelectorAll("[data-field] .errorlist").forEach(function (ul) { ul.textContent = ""; });
    form.querySelectorAll(".has-error").forEach(function (n) { n.classList.remove("has-error"); });
  }

  function showError(message, field) {
    var box = field && form.querySelector("[data-field=" + field + "]");
    if (box) {
      box.querySelector(".errorlist").appendChild(el("li", null, message));
      box.classList.add("has-error");
    } else {
      errorBox.appendChild(el("p", null, message));
      errorBox.hidden = false;
    }
  }

  function body(dryRun) {
    var data = { path: input("path").value.trim(), name: input("name").value, dry_run: dryRun,
                 text_field: input("text_field").value.trim() || "text" };
    form.querySelectorAll("input[type=checkbox][name^='" + prefix + "']").forEach(function (box) {
      data[box.name.slice(prefix.length)] = box.checked;
    });
    return data;
  }

  function row(file) {
    var tr = el("tr");
    tr.appendChild(el("td", "mono", file.name));
    var format = el("td", null, FORMATS[file.format] || file.format);
    format.dataset.format = file.format;
    tr.appendChild(format);
    tr.appendChild(el("td", null, COMPRESSIONS[file.compression] || file.compression));
    tr.appendChild(el("td", "num", bytes(file.bytes)));
    return tr;
  }

  function table(files, withHead) {
    var t = el("table", "compact files-table");
    if (withHead) {
      var head = el("thead");
      var tr = el("tr");
      ["File", "Format", "Compression", "Size"].forEach(function (h, i) { tr.appendChild(el("th", i === 3 ? "num" : null, h)); });
      head.appendChild(tr);
      t.appendChild(head);
    }
    var tbody = el("tbody");
    files.forEach(function (f) { tbody.appendChild(row(f)); });
    t.appendChild(tbody);
    return t;
  }

  function summaryText(found) {
    var s = found.summary || {};
    var parts = [plural(s.files || 0, "file") + ", " + bytes(s.bytes || 0)];
    var formats = Object.keys(s.formats || {}).map(function (k) { return s.formats[k] + " " + (FORMATS[k] || k); });
    var text = parts[0] + (formats.length ? ": " + formats.join(", ") : "");
    var packed = Object.keys(s.compressions || {}).filter(function (k) { return k !== "none"; })
      .map(function (k) { return s.compressions[k] + " " + (COMPRESSIONS[k] || k); });
    if (packed.length) text += "; compressed: " + packed.join(", ");
    if (found.shown < (s.files || 0)) text += " (the first " + found.shown + " are listed)";
    return text;
  }

  function render(found) {
    listing.textContent = "";
    listing.appendChild(el("p", "import-summary", summaryText(found)));
    var files = found.files || [];
    listing.appendChild(table(files.slice(0, SHOWN), true));
    if (files.length > SHOWN) {
      var more = el("details", "split-files files-more");
      more.appendChild(el("summary", null, "Show the other " + plural(files.length - SHOWN, "file")));
      more.appendChild(table(files.slice(SHOWN), false));
      listing.appendChild(more);
    }
    var s = found.summary || {};
    submit.textContent = "Import " + plural(s.files || 0, "file") + " (" + bytes(s.bytes || 0) + ")";
    submit.hidden = false;
  }

  function findFiles() {
    clearErrors();
    submit.hidden = true;
    listedFor = null;
    find.disabled = true;
    var old = find.textContent;
    find.textContent = "Finding files…";
    var asked = key();
    Workbench.postJSON(form.dataset.api, body(true))
      .then(function (found) {
        render(found);
        listedFor = asked;
      })
      .catch(function (err) {
        listing.textContent = "";
        var fields = err.data && err.data.fields;
        if (fields) {
          Object.keys(fields).forEach(function (name) {
            var known = form.querySelector("[data-field=" + name + "]");
            fields[name].forEach(function (msg) { showError(msg, known ? name : null); });
          });
        } else {
          showError(err.message);
        }
      })
      .finally(function () {
        find.disabled = false;
        find.textContent = old;
      });
  }

  form.addEventListener("submit", function (event) {
    var viaFind = event.submitter === find;
    if (viaFind || listedFor !== key()) { // Enter in a field, or the files were not found for these values
      event.preventDefault();
      findFiles();
      return;
    }
    submit.disabled = true;
    submit.textContent = "Importing…";
  });

  ["path", "text_field"].forEach(function (name) {
    input(name).addEventListener("input", function () {
      if (listedFor !== key()) submit.hidden = true;
    });
  });
})();
