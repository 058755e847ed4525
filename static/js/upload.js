// An upload form with a real progress bar (corpora, labelled datasets). Posts the form with
// XMLHttpRequest (so upload.onprogress reports the bytes sent), then goes to the page the server
// names. Without JavaScript the same form posts normally.
// The form says what it takes: data-max-bytes and data-max-human (the size limit), and, where
// they differ from a corpus's, data-suffixes (accepted endings, comma-separated, longer first),
// data-wrong-type (the sentence for another file type; {name} is the file's name), data-saving
// (while the server keeps the file) and data-opening (while the new object's page opens).
// A file input with `multiple` (a corpus's shards) is checked file by file, and their total
// against the size limit.
(function () {
  "use strict";
  var form = document.getElementById("upload-form");
  if (!form || !window.XMLHttpRequest || !window.FormData) return;

  var fileInput = form.querySelector("input[type=file]");
  var submit = document.getElementById("upload-submit");
  var cancel = document.getElementById("upload-cancel");
  var panel = document.getElementById("upload-progress");
  var bar = document.getElementById("upload-bar");
  var percent = document.getElementById("upload-percent");
  var statusText = document.getElementById("upload-status");
  var errorBox = document.getElementById("upload-error");
  var maxBytes = parseInt(form.dataset.maxBytes, 10);
  var accepted = form.dataset.suffixes ? form.dataset.suffixes.split(",") : [".jsonl.gz", ".txt.gz", ".jsonl", ".txt"];
  var wrongType = form.dataset.wrongType ||
    "“{name}” is not a file type LM Workbench reads. Upload a .txt or .jsonl file, " +
    "optionally gzip-compressed (.txt.gz, .jsonl.gz).";
  var saving = form.dataset.saving || "Upload complete; saving…";
  var opening = form.dataset.opening || "Saved. Opening the corpus…";
  var xhr = null;

  function mb(n) { return (n / 1e6).toLocaleString(undefined, { maximumFractionDigits: 1 }) + " MB"; }

  function clearErrors() {
    errorBox.hidden = true;
    errorBox.textContent = "";
    form.querySelectorAll("[data-field] .errorlist").forEach(function (ul) { ul.textContent = ""; });
    form.querySelectorAll(".has-error").forEach(function (el) { el.classList.remove("has-error"); });
  }

  function showError(message, field) {
    var box = field && form.querySelector("[data-field=" + field + "]");
    if (box) {
      var li = document.createElement("li");
      li.textContent = message;
      box.querySelector(".errorlist").appendChild(li);
      box.classList.add("has-error");
    } else {
      var p = document.createElement("p");
      p.textContent = message;
      errorBox.appendChild(p);
      errorBox.hidden = false;
    }
  }

  function setBusy(busy) {
    submit.disabled = busy;
    cancel.hidden = !busy;
    form.querySelectorAll("input").forEach(function (el) { el.readOnly = busy; });
  }

  function checkFile(file, several) {
    if (!file) return "Choose a file to upload.";
    var name = file.name.toLowerCase();
    var ok = accepted.some(function (s) { return name.length > s.length && name.slice(-s.length) === s; });
    if (!ok) return wrongType.replace("{name}", file.name);
    if (file.size === 0) {
      return several ? "“" + file.name + "” is empty (0 bytes). Choose files that contain text."
        : "The file is empty (0 bytes). Choose a file that contains text.";
    }
    if (maxBytes && file.size > maxBytes) {
      return "The file is " + mb(file.size) + "; the largest upload accepted is " + form.dataset.maxHuman + ".";
    }
    return null;
  }

  function chosen() { return Array.prototype.slice.call(fileInput.files || []); }

  function checkFiles(files) {
    if (!files.length) return "Choose a file to upload.";
    for (var i = 0; i < files.length; i += 1) {
      var problem = checkFile(files[i], files.length > 1);
      if (problem) return problem;
    }
    var total = files.reduce(function (sum, f) { return sum + f.size; }, 0);
    if (files.length > 1 && maxBytes && total > maxBytes) {
      return "The " + files.length + " files are " + mb(total) + " in all; the largest upload accepted is " +
        form.dataset.maxHuman + ".";
    }
    return null;
  }

  function describe(files) {
    return files.length === 1 ? files[0].name : files.length + " files";
  }

  fileInput.addEventListener("change", function () {
    clearErrors();
    var problem = checkFiles(chosen());
    if (problem) showError(problem, "file");
  });

  cancel.addEventListener("click", function () {
    if (xhr) xhr.abort();
  });

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    clearErrors();
    var files = chosen();
    var file = { name: describe(files), size: files.reduce(function (sum, f) { return sum + f.size; }, 0) };
    var problem = checkFiles(files);
    if (problem) {
      showError(problem, "file");
      return;
    }

    xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-Requested-With", "XMLHttpRequest");
    xhr.setRequestHeader("Accept", "application/json");
    panel.hidden = false;
    bar.style.width = "0%";
    percent.textContent = "0 %";
    statusText.textContent = "Uploading " + file.name + "…";
    setBusy(true);

    xhr.upload.onprogress = function (e) {
      if (!e.lengthComputable) return;
      var p = Math.floor((100 * e.loaded) / e.total);
      bar.style.width = p + "%";
      percent.textContent = p + " %";
      statusText.textContent = "Uploading " + file.name + " — " + mb(e.loaded) + " of " + mb(e.total);
    };
    xhr.upload.onload = function () {
      bar.style.width = "100%";
      percent.textContent = "100 %";
      statusText.textContent = saving;
    };
    xhr.onload = function () {
      var body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      if (xhr.status >= 200 && xhr.status < 300 && body && body.redirect) {
        statusText.textContent = opening;
        window.location.assign(body.redirect);
        return;
      }
      setBusy(false);
      panel.hidden = true;
      if (xhr.status === 413) {
        showError("The file is larger than the largest upload accepted (" + form.dataset.maxHuman + ").", "file");
      } else if (body && body.fields) {
        Object.keys(body.fields).forEach(function (name) {
          body.fields[name].forEach(function (msg) { showError(msg, name === "__all__" ? null : name); });
        });
      } else if (body && body.error) {
        showError(body.error);
      } else if (xhr.status === 403) {
        showError("Your session has expired. Reload the page, log in again and retry.");
      } else {
        showError("The upload failed (HTTP " + xhr.status + "). Try again in a moment.");
      }
    };
    xhr.onerror = function () {
      setBusy(false);
      panel.hidden = true;
      showError(maxBytes && file.size > maxBytes
        ? "The server refused the file: it is larger than " + form.dataset.maxHuman + "."
        : "The connection was lost during the upload. Check the server is running and try again.");
    };
    xhr.onabort = function () {
      setBusy(false);
      panel.hidden = true;
      showError("Upload cancelled.");
    };
    xhr.send(new FormData(form));
  });
})();
