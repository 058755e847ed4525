// Small helpers of the corpus, tokenizer and account pages:
//  - live progress of pending/processing jobs (polls the JSON API every second), with the stage
//    line under the bar (progress_detail.text: "Reading and cleaning · 412 of 1,024 MB · ..."),
//  - confirmation of destructive forms (data-confirm), copy buttons (data-copy).
(function () {
  "use strict";

  function pollJob(el) {
    var url = el.dataset.jobUrl;
    var bar = el.querySelector(".progress > div");
    var percent = el.querySelector(".job-percent");
    var label = el.querySelector(".job-label");
    var hint = el.querySelector(".job-hint");
    var stage = el.querySelector(".job-stage");
    // the status badge of the same job: the page's (data-job-badge), else the one beside it in a table's cell
    var cell = el.closest(".status-cell");
    var badge = el.dataset.jobBadge ? document.querySelector(el.dataset.jobBadge)
      : (cell ? cell.querySelector(".badge") : null);
    var failures = 0;

    function tick() {
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.json();
        })
        .then(function (job) {
          failures = 0;
          var p = Math.max(0, Math.min(100, Math.round(job.progress || 0)));
          if (bar) bar.style.width = p + "%";
          if (bar && bar.parentElement) bar.parentElement.setAttribute("aria-valuenow", p);
          if (percent) percent.textContent = p + " %";
          // once a worker has made progress the job is no longer waiting for one, whatever the row said
          var waiting = job.status === "pending" && p === 0;
          if (label) label.textContent = waiting ? "Waiting for a worker…" : "Processing…";
          if (hint && !waiting) hint.hidden = true;
          var detail = job.progress_detail && job.progress_detail.text;
          if (stage) {
            stage.textContent = detail || "";
            stage.hidden = !detail;
          }
          if (badge && (job.status === "pending" || job.status === "processing")) {
            badge.className = "badge " + (waiting ? "pending" : "processing");
            badge.textContent = waiting ? (job.status_label || "Waiting for a worker") : "Processing";
          }
          if (job.status === "ready" || job.status === "failed") {
            window.location.reload();
            return;
          }
          setTimeout(tick, 1000);
        })
        .catch(function () {
          failures += 1; // the server restarting: keep trying, more slowly
          setTimeout(tick, Math.min(10000, 1000 * (1 + failures)));
        });
    }
    setTimeout(tick, 1000);
  }

  document.querySelectorAll(".job[data-job-url]").forEach(pollJob);

  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });

  document.querySelectorAll("[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var field = document.querySelector(button.dataset.copy);
      if (!field) return;
      field.select();
      var done = function () {
        var old = button.textContent;
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = old; }, 1500);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(done);
      } else {
        document.execCommand("copy");
        done();
      }
    });
  });

  // The tokenizer form: the number of T5 sentinel tokens follows the algorithm (Unigram, the one
  // T5 trains: T5's 100; the others: none) until the person types a number of their own.
  var sentinels = document.querySelector("input[name=extra_ids][data-defaults]");
  var algorithm = sentinels && sentinels.form ? sentinels.form.querySelector("select[name=algorithm]") : null;
  if (sentinels && algorithm) {
    var defaults = JSON.parse(sentinels.dataset.defaults);
    var edited = false;
    sentinels.addEventListener("input", function () { edited = true; });
    algorithm.addEventListener("change", function () {
      if (!edited) sentinels.value = String(defaults[algorithm.value] || 0);
    });
  }
})();
