// Explorer: T5 text-to-text and span filling, GPT generation streamed over the websocket
// /ws/explore/generate/ (falling back to POST /api/explore/generate/ when the socket fails),
// ELMo word similarity. Without this file the same buttons post the form and the page answers.
(function () {
  "use strict";
  const form = document.getElementById("explore-form");
  if (!form) return;
  const select = document.getElementById("id_checkpoint");
  const $ = (id) => document.getElementById(id);
  const SENTINEL = /<extra_id_(\d+)>/g;

  const { el, postJSON } = Workbench;
  const TOOLS = Workbench.explorerTools(); // each tool's endpoint

  function showError(action, message) {
    const box = form.querySelector(`[data-error="${action}"]`);
    if (box) box.textContent = message || "";
  }

  // The generated text, or why there is none to show.
  function shownText(data) {
    if (data.text) return data.text;
    return (data.tokens || []).length
      ? "(no text: the model wrote only special tokens, e.g. sentinels; it needs more training)"
      : "(nothing: the model ended at once)";
  }

  function stoppedText(data, what) {
    const n = (data.tokens || []).length;
    if (data.stopped === "cancelled") return "Stopped before the end.";
    return `${n} tokens; ` + (data.stopped === "end" ? `the model ended the ${what} itself.` : "stopped at the token limit.");
  }

  // ---- decoding controls ------------------------------------------------------------------------
  const strategy = $("id_strategy");
  function onStrategy() {
    for (const node of form.querySelectorAll("[data-strategy]")) node.hidden = node.dataset.strategy !== strategy.value;
  }
  if (strategy) { strategy.addEventListener("change", onStrategy); onStrategy(); }

  function decoding() {
    const number = (id) => {
      const input = $(id);
      return input && input.value.trim() !== "" ? Number(input.value) : undefined;
    };
    // Only the fields the chosen strategy reads: a leftover sampling value never blocks greedy decoding.
    const chosen = strategy ? strategy.value || "greedy" : "greedy";
    const out = { strategy: chosen, max_new_tokens: number("id_max_new_tokens") };
    if (chosen === "beam") out.num_beams = number("id_num_beams");
    if (chosen === "sample") {
      Object.assign(out, { temperature: number("id_temperature"), top_k: number("id_sample_top_k"),
                           top_p: number("id_top_p"), seed: number("id_seed") });
    }
    for (const key of Object.keys(out)) if (out[key] === undefined) delete out[key];
    return out;
  }

  // ---- UniLM: source -> target, with the same decoding controls ----------------------------------
  // (its button submits the form: without this file the page answers, webapp/explorer/views.py)
  async function generateTarget() {
    const data = await postJSON(TOOLS.generate.url, { checkpoint: select.value, prompt: $("id_source").value, ...decoding() });
    $("generate-text").textContent = shownText(data);
    $("generate-stopped").textContent = stoppedText(data, "target");
    $("generate-result").hidden = false;
  }

  // ---- T5: task prefixes and sentinels ------------------------------------------------------------
  const prefix = $("id_task_prefix");
  const prompt = $("id_prompt");
  // The picker shows the preset the input starts with (none: "type it yourself"), so it keeps the
  // chosen prefix through a run and follows the input as it is edited.
  const matching = () => {
    const text = prompt.value.trimStart();
    for (const option of prefix.options) {
      const known = option.value.trim();
      if (known && text.startsWith(known)) return option.value;
    }
    return "";
  };
  if (prefix && prompt) {
    prefix.addEventListener("change", () => {
      if (!prefix.value) return;
      // Replace a prefix the prompt already has (one of the presets), else put the new one in front.
      let rest = prompt.value.trimStart();
      const had = matching();
      if (had) rest = rest.slice(had.trim().length).trimStart();
      prompt.value = prefix.value + rest;
      prompt.focus();
    });
    prompt.addEventListener("input", () => { prefix.value = matching(); });
    if (!prefix.value) prefix.value = matching();
  }

  // A checkpoint of a text-to-text fine-tuning run: its inputs began with the run's task prefix.
  const runPrefix = $("run-prefix");
  let lastRunPrefix = runPrefix ? runPrefix.querySelector("[data-prefix]").textContent : "";
  if (select && prompt && runPrefix) select.addEventListener("change", () => {
    const option = select.selectedOptions[0];
    const now = option ? option.dataset.prefix || "" : "";
    const typed = prompt.value.trimStart();
    if (!typed || (lastRunPrefix && typed.startsWith(lastRunPrefix.trim()))) {
      prompt.value = now + (lastRunPrefix ? typed.slice(lastRunPrefix.trim().length).trimStart() : typed);
    }
    runPrefix.querySelector("[data-prefix]").textContent = now;
    runPrefix.hidden = !now;
    lastRunPrefix = now;
    if (prefix) prefix.value = matching();
  });

  function withPrefix() {
    const text = prompt.value.trim();
    const p = prefix && prefix.value;
    return p && !text.startsWith(p.trim()) ? p + text : text;
  }

  const spanText = $("id_span_text");
  const insertSentinel = $("insert-sentinel");
  if (insertSentinel && spanText) insertSentinel.addEventListener("click", () => {
    const used = [...spanText.value.matchAll(SENTINEL)].map((m) => Number(m[1]));
    const token = `<extra_id_${used.length ? Math.max(...used) + 1 : 0}>`;
    const start = spanText.selectionStart ?? spanText.value.length, end = spanText.selectionEnd ?? start;
    const before = spanText.value.slice(0, start), after = spanText.value.slice(end);
    const pad = before && !/\s$/.test(before) ? " " : "";
    spanText.value = before + pad + token + after;
    const caret = (before + pad + token).length;
    spanText.focus();
    spanText.setSelectionRange(caret, caret);
  });

  // ---- answers ----------------------------------------------------------------------------------
  async function textToText() {
    const box = $("text-to-text-result");
    const data = await postJSON(TOOLS.generate.url, { checkpoint: select.value, prompt: withPrefix(), ...decoding() });
    box.querySelector("[data-output]").textContent = shownText(data);
    box.querySelector("[data-stopped]").textContent = stoppedText(data, "output");
    box.hidden = false;
  }

  async function fillSpans() {
    const box = $("fill-spans-result");
    const text = spanText.value;
    const data = await postJSON(TOOLS.fill_spans.url, { checkpoint: select.value, text, ...decoding() });
    const byIndex = new Map(data.spans.map((s) => [s.index, s]));
    // The text with each sentinel replaced by its span, highlighted.
    const filled = box.querySelector("[data-filled]");
    filled.replaceChildren();
    let last = 0;
    for (const m of text.matchAll(SENTINEL)) {
      filled.append(text.slice(last, m.index));
      const span = byIndex.get(Number(m[1]));
      if (span && span.found) {
        const mark = el("mark", "explorer-span", span.text || "∅");
        mark.title = m[0];
        filled.append(mark);
      } else {
        filled.append(m[0]);
      }
      last = m.index + m[0].length;
    }
    filled.append(text.slice(last));
    const table = box.querySelector("[data-spans]");
    table.replaceChildren();
    for (const span of data.spans) {
      const row = el("tr");
      const cell = el("td");
      if (span.found) cell.append(el("mark", "explorer-span", span.text || "(empty)"));
      else cell.append(el("span", "muted", "not in the output"));
      row.append(el("td", "mono", span.sentinel), cell);
      table.append(row);
    }
    const raw = box.querySelector("[data-raw]");
    raw.replaceChildren("Raw output: ", el("span", "mono", data.output || "(empty)"));
    box.hidden = false;
  }

  async function wordSimilarity() {
    const box = $("word-similarity-result");
    const data = await postJSON(TOOLS.word_similarity.url, {
      checkpoint: select.value, sentence_a: $("id_sentence_a").value, sentence_b: $("id_sentence_b").value,
      word: $("id_word").value,
    });
    const table = box.querySelector("[data-layers]");
    table.replaceChildren();
    for (const layer of data.layers) {
      const meter = el("div", "explorer-meter");
      const bar = el("div");
      bar.style.width = `${Math.max(0, 100 * layer.cosine).toFixed(0)}%`;
      meter.append(bar);
      const cell = el("td", "explorer-cosine");
      cell.append(meter);
      const value = el("td");
      value.append(el("b", "", layer.cosine.toFixed(3)));
      const row = el("tr");
      row.append(el("td", "", layer.name), cell, value);
      table.append(row);
    }
    box.hidden = false;
  }

  // ---- GPT: streamed generation -----------------------------------------------------------------
  const stopButton = $("stream-stop");
  let socket = null;

  function generate() {
    return new Promise((resolve) => {
      const box = $("stream-result");
      const text = box.querySelector("[data-output]").parentElement;
      const output = box.querySelector("[data-output]");
      const promptText = $("id_gen_prompt").value.trim();
      const chatBox = $("id_gen_chat");
      const chat = Boolean(chatBox && chatBox.checked && !chatBox.closest("[data-tool]").hidden);
      const body = { checkpoint: select.value, prompt: promptText, chat, ...decoding() };
      box.querySelector("[data-prompt]").textContent = promptText;
      output.textContent = "";
      box.querySelector("[data-stopped]").textContent = "";
      box.hidden = false;
      text.classList.add("streaming");
      let started = false, finished = false, fellBack = false;

      function finish(data, error) {
        if (finished) return;
        finished = true;
        text.classList.remove("streaming");
        if (stopButton) stopButton.hidden = true;
        if (error) showError("generate", error);
        if (data) {
          output.textContent = data.text;
          box.querySelector("[data-stopped]").textContent = stoppedText(data, "text");
        } else if (!started) {
          box.hidden = true;
        }
        if (socket) { socket.close(); socket = null; }
        resolve();
      }

      async function fallback() {  // the socket could not be used: ask the API for the whole text
        if (finished || fellBack) return;
        fellBack = true;
        if (socket) { socket.onclose = socket.onerror = null; socket.close(); socket = null; }
        try {
          finish(await postJSON(TOOLS.generate.url, body));
        } catch (e) {
          finish(null, e.message || Workbench.UNREACHABLE);
        }
      }

      try {
        socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + form.dataset.stream);
      } catch (e) {
        fallback();
        return;
      }
      socket.onopen = () => {
        socket.send(JSON.stringify({ type: "generate", ...body }));
        if (stopButton) stopButton.hidden = false;
      };
      socket.onmessage = (event) => {
        const message = JSON.parse(event.data);
        if (message.type === "token") { started = true; output.textContent += message.text; }
        else if (message.type === "done") finish(message);
        else if (message.type === "error") finish(null, message.message);
      };
      socket.onerror = () => { if (!started) fallback(); };
      socket.onclose = () => {
        if (finished) return;
        if (!started) fallback();
        else finish(null, "The connection was lost before the text was finished.");
      };
    });
  }
  if (stopButton) stopButton.addEventListener("click", () => {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "stop" }));
  });

  // ---- asking -----------------------------------------------------------------------------------
  const HANDLERS = { text_to_text: textToText, fill_spans: fillSpans, word_similarity: wordSimilarity, generate,
                     generate_seq2seq: generateTarget };
  const RESULTS = { text_to_text: "text-to-text-result", fill_spans: "fill-spans-result",
                    word_similarity: "word-similarity-result", generate_seq2seq: "generate-result" };

  form.addEventListener("submit", async (event) => {
    const action = event.submitter && event.submitter.value;
    if (!HANDLERS[action]) return;
    event.preventDefault();
    const button = event.submitter;
    button.disabled = true;
    showError(action, "");
    showError("decoding", "");
    try {
      await HANDLERS[action](button);
    } catch (e) {
      showError(action, e.message || Workbench.UNREACHABLE);
      if (RESULTS[action]) $(RESULTS[action]).hidden = true;
    } finally {
      button.disabled = false;
    }
  });
})();
