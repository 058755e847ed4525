// Run dashboard: draw the metric history, then follow the run live over its websocket.
//
// Every point is kept per split in a Map step -> values, so a point is never drawn twice:
// live events usually extend the traces (Plotly.extendTraces); a late point that falls
// before the newest one (a catch-up after a reconnect) redraws that chart in order.
(function () {
  "use strict";
  const dataEl = document.getElementById("dashboard-data");
  if (!dataEl || typeof Plotly === "undefined") return;
  const run = JSON.parse(dataEl.textContent);
  const urls = document.getElementById("dashboard-urls").dataset;
  const ACTIVE = new Set(["queued", "running"]);
  const RESUMABLE = new Set(["cancelled", "crashed", "failed"]);

  // ---- charts ---------------------------------------------------------------------------
  // The server says what to draw (trainer/charts.py: charts_for): each chart has its title, y
  // scale, legend placement, optional right-hand axis title, and its series, each naming the
  // metric key, the split it comes from, its legend label, colour, axis and a transform of the
  // logged value. The page renders one element #chart-<id> per chart.
  const CHARTS = JSON.parse(document.getElementById("dashboard-charts").textContent)
    .filter((c) => document.getElementById("chart-" + c.id));
  const STATS = JSON.parse(document.getElementById("dashboard-stats").textContent);
  const COLORS = { train: "#3f5bd9", valid: "#e0692b" };
  const FEW_POINTS = 3; // a series of at most this many points is drawn with markers
  const SCALES = {
    // ".2~%": 0.004 reads 0.4% (".0%" made every tick of an early MLM accuracy read 0%), 0.5 reads 50%
    percent: { tickformat: ".2~%", rangemode: "tozero" },
    scientific: { exponentformat: "e" },
    log: { type: "log" },
  };
  // A series' transform turns the logged value into the charted one.
  const TRANSFORMS = { exp: (v) => Math.exp(Math.min(v, 50)) };
  const valueOf = (values, key, fn) => {
    const v = (values || {})[key];
    if (v === null || v === undefined) return undefined;
    return fn && TRANSFORMS[fn] ? TRANSFORMS[fn](v) : v;
  };

  const logged = { train: new Map(), valid: new Map() }; // split -> step -> the values logged there
  const newest = { train: -1, valid: -1 };
  let lastCursor = 0; // the newest point's cursor (its place in the order the run's points were stored)

  let drawnEmpty = true;

  function layout(chart, empty) {
    const y = SCALES[chart.scale] || {};
    const head = Workbench.chartHead(chart.title);
    return {
      title: head.title,
      margin: { l: 56, r: 16, ...head.margin },
      // An empty chart spans the whole run instead of Plotly's arbitrary default axes.
      xaxis: { title: { text: "step", font: { size: 11 } }, rangemode: "tozero",
               ...(empty ? { range: [0, Math.max(1, state.maxSteps)] } : {}) },
      yaxis: { ...y, ...(empty ? { range: [0, 1] } : {}) },
      legend: head.legend, // under the plot, clear of the title

      hovermode: "x unified",
      showlegend: chart.series.length > 1,
      ...(chart.y2_title
        ? { yaxis2: { title: { text: chart.y2_title, font: { size: 11 } }, overlaying: "y", side: "right" } } : {}),
    };
  }

  function traceData(split, key, fn) {
    const x = [], y = [];
    for (const step of Array.from(logged[split].keys()).sort((a, b) => a - b)) {
      const v = valueOf(logged[split].get(step), key, fn);
      if (v !== undefined) { x.push(step); y.push(v); }
    }
    return { x, y };
  }

  const modeOf = (s, points) => (s.split === "valid" || points <= FEW_POINTS ? "lines+markers" : "lines");

  function drawChart(chart) {
    // Validation points get markers, and so does a series of a few points (one point draws no
    // line: without a marker the chart looked empty); a series with its own colour is dotted in
    // validation, so that it stands apart from its training line.
    const traces = chart.series.map((s) => {
      const data = traceData(s.split, s.metric, s.transform);
      return {
        ...data, name: s.label, type: "scatter", mode: modeOf(s, data.x.length),
        line: { color: s.color || COLORS[s.split], width: 2, ...(s.color && s.split === "valid" ? { dash: "dot" } : {}) },
        marker: { size: 5 }, ...(s.axis === "y2" ? { yaxis: "y2" } : {}),
      };
    });
    const empty = logged.train.size === 0 && logged.valid.size === 0;
    Plotly.react("chart-" + chart.id, traces, layout(chart, empty), { responsive: true, displaylogo: false });
  }

  function drawAll() {
    drawnEmpty = logged.train.size === 0 && logged.valid.size === 0;
    CHARTS.forEach(drawChart);
  }

  function addPoints(points) {
    const appended = [];
    let outOfOrder = false;
    for (const p of points) {
      if (p.cursor > lastCursor) lastCursor = p.cursor;
      const s = logged[p.split];
      if (!s || s.has(p.step)) continue; // already drawn
      s.set(p.step, p.values || {});
      if (p.step > newest[p.split]) { newest[p.split] = p.step; appended.push(p); } else { outOfOrder = true; }
    }
    if (outOfOrder || (drawnEmpty && appended.length)) drawAll();
    else if (appended.length) extend(appended);
    if (appended.length || outOfOrder) updateStats();
  }

  function extend(points) {
    for (const chart of CHARTS) {
      const xs = chart.series.map(() => []), ys = chart.series.map(() => []);
      chart.series.forEach((s, i) => {
        for (const p of points) {
          const v = p.split === s.split ? valueOf(p.values, s.metric, s.transform) : undefined;
          if (v !== undefined) { xs[i].push(p.step); ys[i].push(v); }
        }
      });
      const idx = chart.series.map((_, i) => i).filter((i) => xs[i].length);
      if (idx.length) {
        const id = "chart-" + chart.id;
        Plotly.extendTraces(id, { x: idx.map((i) => xs[i]), y: idx.map((i) => ys[i]) }, idx);
        // a series that has grown past a few points drops its markers
        const drawn = document.getElementById(id).data;
        const mode = (i) => modeOf(chart.series[i], drawn[i].x.length);
        const grown = idx.filter((i) => drawn[i].mode !== mode(i));
        if (grown.length) Plotly.restyle(id, { mode: grown.map(mode) }, grown);
      }
    }
  }

  function dropAfter(step) {
    for (const split of ["train", "valid"]) {
      for (const s of Array.from(logged[split].keys())) if (s > step) logged[split].delete(s);
      newest[split] = Math.max(-1, ...logged[split].keys());
    }
    drawAll();
  }

  // ---- numbers on the page --------------------------------------------------------------
  // Whole numbers with the server's thousands separators (corpora_tags.thousands: "140,031"), so
  // that a number the page was rendered with and one a live update wrote look the same.
  const count = (n) => n.toLocaleString("en-US");
  const fmt = {
    fixed: (v, digits) => v.toFixed(digits),
    percent: (v, digits) => (100 * v).toFixed(digits) + "%",
    integer: (v) => count(Math.round(v)),
    duration: (s) => {
      s = Math.max(0, Math.round(s));
      if (s < 60) return s + "s";
      if (s < 3600) return Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s";
      return Math.floor(s / 3600) + "h " + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    },
  };

  function last(split) {
    const step = newest[split];
    return step >= 0 ? logged[split].get(step) : null;
  }

  function setStat(name, text) {
    const el = document.querySelector(`[data-stat="${name}"]`);
    if (el && text !== undefined) el.textContent = text;
  }

  // A number above the charts (trainer/charts.py: stats_for) shows the newest value of its
  // metric from the first of its splits whose newest point has it.
  function statText(stat) {
    for (const split of stat.splits) {
      const point = last(split);
      const v = point ? point[stat.metric] : undefined;
      if (typeof v === "number") return (fmt[stat.format] || fmt.fixed)(v, stat.digits);
    }
    return undefined;
  }

  function updateStats() {
    for (const stat of STATS) setStat(stat.id, statText(stat));
    const t = last("train");
    if (t && newest.train > state.step) setStep(newest.train);
    updateEta();
    document.getElementById("charts-empty").hidden = newest.train >= 0 || newest.valid >= 0;
  }

  // ---- run state --------------------------------------------------------------------------
  const state = {
    status: run.status, step: run.step, maxSteps: run.max_steps, epochs: run.epochs || 0, finished: run.finished,
    cancelRequested: run.cancel_requested,
  };

  function setStep(step) {
    state.step = step;
    document.getElementById("run-step").textContent =
      `step ${count(step)}` + (state.maxSteps ? ` / ${count(state.maxSteps)}` : "");
    const epoch = document.getElementById("run-epoch");  // a run given in epochs (runs_extras.epoch_of)
    if (epoch) {
      const done = state.maxSteps ? Math.min(state.epochs, (state.epochs * step) / state.maxSteps) : 0;
      epoch.textContent = `epoch ${done.toFixed(1)} / ${state.epochs}`;
    }
    const pct = state.maxSteps ? Math.min(100, (100 * step) / state.maxSteps) : 0;
    document.getElementById("run-progress-bar").style.width = pct.toFixed(1) + "%";
  }

  function updateEta() {
    const el = document.getElementById("run-eta");
    const t = last("train");
    if (state.finished) el.textContent = state.status === "succeeded" ? "Finished" : "";
    else if (state.status === "queued") el.textContent = "Waiting for a worker";
    else if (t && typeof t.eta_s === "number") el.textContent = "about " + fmt.duration(t.eta_s) + " left";
    else el.textContent = "";
  }

  function applyStatus(msg) {
    state.status = msg.status;
    state.finished = !!msg.finished;
    state.cancelRequested = !!msg.cancel_requested;
    if (typeof msg.max_steps === "number") state.maxSteps = msg.max_steps;
    if (typeof msg.step === "number") setStep(msg.step);
    const badge = document.getElementById("run-status");
    badge.className = "badge " + msg.status;
    badge.textContent = msg.status_label || msg.status;
    refreshButtons();
    const errorBox = document.getElementById("run-error");
    errorBox.hidden = !msg.error;
    if (msg.error) {
      document.getElementById("run-error-title").textContent = msg.status === "crashed" ? "The run crashed" : "The run failed";
      document.getElementById("run-error-text").textContent = msg.error;
    }
    const note = document.getElementById("run-note");
    if (msg.status === "queued") { note.hidden = false; note.textContent = msg.waiting || "Waiting for a worker to pick the run up."; }
    else if (msg.status === "running" && state.cancelRequested) { note.hidden = false; note.textContent = "Stopping: the run saves a checkpoint, then ends."; }
    else note.hidden = true;
    dropQueuedMessages();
    updateEta();
  }

  // "… is queued" (the message of the page that launched, resumed or cloned the run) is true only
  // while the run waits: it goes once the run trains, and after it ends.
  function dropQueuedMessages() {
    if (state.status === "queued") return;
    for (const msg of document.querySelectorAll(".messages .msg.run-queued")) {
      const list = msg.parentElement;
      msg.remove();
      if (!list.children.length) list.remove();
    }
  }

  function refreshButtons() {
    document.getElementById("cancel-form").hidden = !ACTIVE.has(state.status) || state.cancelRequested;
    document.getElementById("resume-form").hidden = !(RESUMABLE.has(state.status) && hasCheckpoints());
    document.getElementById("run-error-hint").textContent = hasCheckpoints()
      ? "Resume continues from the last checkpoint." : "Clone the run to start it again.";
  }

  // ---- checkpoints and log ------------------------------------------------------------------
  // ---- generated samples (text-to-text, SFT): the newest validation's, as text (never HTML) ----
  let samplesStep = -1;
  function showSamples(msg) {
    const body = document.getElementById("samples-body");
    if (!body || !Array.isArray(msg.samples) || msg.step < samplesStep) return;
    samplesStep = msg.step;
    const rows = msg.samples.map((s) => {
      const row = document.createElement("tr");
      for (const key of ["input", "generated", "reference"]) {
        const td = document.createElement("td");
        td.textContent = String(s[key] ?? "");
        row.appendChild(td);
      }
      return row;
    });
    body.replaceChildren(...rows);
    document.getElementById("samples-step").textContent = `at step ${count(msg.step)}`;
    document.getElementById("samples-empty").hidden = rows.length > 0;
  }

  // "1 Dec, 20:04:57" as the server renders the rows it sends with the page (date:"j M, H:i:s", in
  // the server's time zone, UTC), so a row added live reads like the ones above it.
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const two = (n) => String(n).padStart(2, "0");
  const clockTime = (d) => `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}`;
  function checkpointTime(iso) {
    const d = new Date(iso);
    return `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]}, ${clockTime(d)}`;
  }

  function hasCheckpoints() { return !!document.querySelector("#checkpoints-body tr"); }

  function addCheckpoint(c) {
    const body = document.getElementById("checkpoints-body");
    if (body.querySelector(`tr[data-step="${c.step}"]`)) return;
    const row = document.createElement("tr");
    row.dataset.step = c.step;
    const m = c.metrics || {};
    const loss = (split) => (m[split] && typeof m[split].loss === "number" ? m[split].loss.toFixed(4) : "–");
    const cells = [count(c.step), loss("train"), loss("valid"),
      c.created_at ? checkpointTime(c.created_at) : "", c.holds || "", c.size || ""];
    for (const text of cells) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
    row.children[4].dataset.holds = ""; row.children[5].dataset.size = "";
    const td = document.createElement("td"), a = document.createElement("a");
    const csrf = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (c.pin_url && csrf) {  // the Pin button of the rows the page was rendered with
      const form = document.createElement("form");
      form.method = "post"; form.action = c.pin_url; form.className = "inline"; form.dataset.pin = "";
      for (const [name, value] of [["csrfmiddlewaretoken", csrf.value], ["pin", "1"]]) {
        const input = document.createElement("input");
        input.type = "hidden"; input.name = name; input.value = value; form.appendChild(input);
      }
      const button = document.createElement("button");
      button.type = "submit"; button.className = "link"; button.textContent = "Pin";
      button.title = "Keep it whatever keep_last says: the run's retention never removes a pinned checkpoint";
      form.appendChild(button); td.append(form, " · ");
    }
    a.href = c.explore_url; a.textContent = "Explore"; td.appendChild(a);
    if (c.finetune_url) {  // the same links as the rows the page was rendered with
      const tune = document.createElement("a");
      tune.href = c.finetune_url; tune.textContent = "Fine-tune";
      td.append(" · ", tune);
    }
    if (c.export_url) {
      const hf = document.createElement("a");
      hf.href = c.export_url; hf.textContent = "Export";
      hf.title = "Export it as Hugging Face transformers, ONNX or GGUF (a zip made in the background)";
      td.append(" · ", hf);
    }
    if (c.serve_url) {
      const serve = document.createElement("a");
      serve.href = c.serve_url; serve.textContent = "Serve";
      serve.title = "Serve it over an OpenAI-compatible API (a model server run by the serve worker)";
      td.append(" · ", serve);
    }
    row.appendChild(td);
    const after = Array.from(body.children).find((r) => Number(r.dataset.step) > c.step);
    if (!after && run.keep_last > 0) {  // retention: only the newest keeps the optimizer state now
      for (const cell of body.querySelectorAll("td[data-holds]")) {
        const pinned = cell.querySelector("[data-pinned]");
        cell.textContent = "weights";
        if (pinned) cell.append(" · ", pinned);
      }
    }
    body.insertBefore(row, after || null);
    document.getElementById("checkpoints-empty").hidden = true;
    refreshButtons();
  }

  // Retention removed these checkpoints after a save: their rows go (their files are gone).
  function removeCheckpoints(steps) {
    const body = document.getElementById("checkpoints-body");
    for (const step of steps || []) {
      const row = body.querySelector(`tr[data-step="${step}"]`);
      if (row) row.remove();
    }
    document.getElementById("checkpoints-empty").hidden = hasCheckpoints();
    refreshButtons();
  }

  let lastLogId = run.last_log_id || 0;
  function appendLog(msg) {
    if (msg.id && msg.id <= lastLogId) return;
    if (msg.id) lastLogId = msg.id;
    const pre = document.getElementById("run-log");
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    const span = document.createElement("span");
    const time = msg.time ? clockTime(new Date(msg.time)) : "";  // as the server renders the page's lines (H:i:s)
    span.textContent = `[${time}] ${msg.text}\n`;
    pre.appendChild(span);
    while (pre.children.length > 500) pre.removeChild(pre.firstChild);
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  // ---- history and catch-up over HTTP --------------------------------------------------------
  async function fetchJson(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    return response.json();
  }

  async function fetchMetrics() {
    addPoints((await fetchJson(urls.metrics)).points);
  }

  async function catchUpLogAndCheckpoint() {
    // The log lines and the newest checkpoint published while the socket was away (metric points
    // come back through the socket's own replay: see connect).
    try {
      for (const line of await fetchJson(`${urls.log}?after=${lastLogId}`)) appendLog(line);
      const detail = await fetchJson(urls.run);
      if (detail.last_checkpoint) addCheckpoint(detail.last_checkpoint);
    } catch (e) { /* the next reconnect tries again */ }
  }

  // ---- websocket ---------------------------------------------------------------------------
  const wsState = document.getElementById("ws-state");
  let socket = null, retry = 0, everOpened = false;

  // The socket replays every stored metric point after the cursor `after` before the live ones,
  // each point once and in the order they were stored (webapp/runs/consumers.py). The page asks
  // from the newest cursor it has read (over HTTP or the socket), so a point published while it
  // was away, or while it was connecting, is never missed, whatever its split; after=0 is all.
  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${scheme}//${location.host}/ws/runs/${run.run_id}/?after=${lastCursor}`);
    socket.onopen = () => {
      retry = 0;
      wsState.textContent = "Live.";
      everOpened = true;
      catchUpLogAndCheckpoint();  // what was logged between the page's rendering (or the drop) and now
    };
    socket.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      switch (msg.type) {
        case "hello": applyStatus(msg); break;
        case "metrics": addPoints([msg]); break;
        case "heartbeat":
          if (msg.step > state.step) setStep(msg.step);
          setStat("tokens_seen", fmt.integer(msg.tokens_seen));
          break;
        case "length": state.maxSteps = msg.max_steps; setStep(state.step); break;
        case "log": appendLog(msg); break;
        case "checkpoint": addCheckpoint(msg); break;
        case "checkpoints_removed": removeCheckpoints(msg.steps); break;
        case "samples": showSamples(msg); break;
        case "status":
          if (msg.resumed_from !== undefined && msg.resumed_from !== null) dropAfter(msg.resumed_from);
          applyStatus(msg);
          if (msg.finished) catchUpLogAndCheckpoint();
          break;
      }
    };
    socket.onclose = () => {
      if (state.finished && everOpened) { wsState.textContent = "The run has finished."; return; }
      const delay = Math.min(30000, 1000 * 2 ** retry) * (0.75 + Math.random() / 2);
      retry += 1;
      wsState.textContent = retry > 5
        ? `Live updates unavailable (still retrying; are you logged in?). Next try in ${Math.round(delay / 1000)} s.`
        : `Connection lost; reconnecting in ${Math.round(delay / 1000)} s…`;
      setTimeout(connect, delay);
    };
  }

  drawAll();
  setStep(state.step);
  dropQueuedMessages();
  fetchMetrics()
    .catch(() => { wsState.textContent = "Could not load the metric history; retrying live."; })
    .finally(() => { if (!(state.finished && newest.train >= 0)) connect(); else wsState.textContent = "The run has finished."; });
})();
