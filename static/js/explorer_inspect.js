// Masking inspector: draw another batch (the next seed) or another run without reloading the page.
// The chips are built like templates/explorer/inspect.html builds them without JavaScript.
(function () {
  "use strict";
  const form = document.getElementById("inspect-form");
  if (!form) return;
  const runSelect = document.getElementById("id_run");
  const seedInput = document.getElementById("id_seed");
  const reload = document.getElementById("inspect-reload");
  const box = document.getElementById("inspect-examples");
  const errorBox = document.getElementById("inspect-error");
  const caption = document.getElementById("inspect-caption");
  const { el, postJSON } = Workbench;

  function chip(t) {
    const c = el("span", `inspect-chip role-${t.role} seg-${t.segment}`, t.token);
    const chosen = ["masked", "random", "kept"].includes(t.role);
    c.title = `${t.role}${chosen ? " · target " + t.original : ""} · segment ${t.segment ? "B" : "A"}`;
    if (t.role === "masked" || t.role === "random") c.appendChild(el("sub", "", t.original));
    return c;
  }

  function tokens(list) {
    const row = el("div", "inspect-tokens");
    let span = null, spanId = null;
    list.forEach((t, i) => {
      if (i && t.segment !== list[i - 1].segment) {
        const b = el("span", "inspect-boundary");
        b.title = "Segment A | segment B";
        row.appendChild(b);
        span = null;
      }
      if (t.span === null || t.span === undefined) { span = null; row.appendChild(chip(t)); return; }
      if (!span || spanId !== t.span) {
        span = el("span", "inspect-span");
        span.title = `Span ${t.span}`;
        spanId = t.span;
        row.appendChild(span);
      }
      span.appendChild(chip(t));
    });
    return row;
  }

  // ELECTRA: the generator's sample at each selected position, then the discriminator's input
  // shaded by its P(replaced); a replaced token is outlined.
  function electraView(view) {
    const box = el("div", "inspect-electra");
    box.appendChild(el("p", "muted small", `ELECTRA: ${view.message || ""}`));
    const gen = el("div", "inspect-tokens");
    gen.title = "Generator: original → sample";
    for (const g of view.generator) gen.appendChild(el("span", `inspect-chip ${g.replaced ? "role-random" : "role-kept"}`, `${g.original} → ${g.sampled}`));
    const disc = el("div", "inspect-tokens");
    disc.title = "Discriminator input, shaded by P(replaced)";
    for (const d of view.discriminator) {
      const c = el("span", `inspect-chip electra-verdict${d.replaced ? " replaced" : ""}`, d.token);
      c.style.setProperty("--p", d.p_replaced);
      c.title = `P(replaced) = ${d.p_replaced}`;
      disc.appendChild(c);
    }
    box.append(gen, disc);
    return box;
  }

  function draw(data) {
    box.replaceChildren();
    caption.textContent = `${data.objectives.join(" + ").toUpperCase()} · ${data.masking} masking by ${data.masking_unit} · mask probability ` +
      `${data.mask_prob} · seed ${data.seed} (the first batch of epoch ${data.seed}, as the run's collator makes it)`;
    for (const ex of data.examples) {
      const wrap = el("div", "inspect-example");
      const head = el("div", "inspect-head");
      head.appendChild(el("b", "", `Example ${ex.index + 1}`));
      if (ex.pair) head.append(" ", el("span", "badge", `${ex.pair.task.toUpperCase()}: ${ex.pair.meaning}`));
      head.append(" ", el("span", "muted small", Object.entries(ex.counts).map(([r, n]) => `${n} ${r}`).join(" · ")));
      wrap.append(head, tokens(ex.tokens));
      if (ex.note) wrap.appendChild(el("p", "muted small", ex.note));
      if (ex.target) {
        // Encoder-decoder objectives (T5): what the decoder learns to write.
        wrap.appendChild(el("p", "muted small inspect-target-label", "Decoder target"));
        const row = el("div", "inspect-tokens");
        row.title = "What the decoder learns to write";
        for (const t of ex.target.tokens) row.appendChild(el("span", `inspect-chip role-${t.role}`, t.token));
        wrap.appendChild(row);
      }
      if (ex.electra) wrap.appendChild(electraView(ex.electra));
      box.appendChild(wrap);
    }
  }

  async function show(seed) {
    errorBox.textContent = "";
    reload.disabled = true;
    try {
      let data;
      try {
        data = await postJSON(form.dataset.api, { run: runSelect.value, seed, n_examples: Number(form.dataset.examples) });
      } catch (e) {
        errorBox.textContent = e.message;
        box.replaceChildren();
        caption.textContent = "";
        return;
      }
      seedInput.value = seed;
      reload.value = seed + 1;
      const url = new URL(location.href);
      url.searchParams.set("run", runSelect.value);
      url.searchParams.set("seed", seed);
      history.replaceState(null, "", url);
      draw(data);
    } catch (e) {
      errorBox.textContent = "The batch came but could not be drawn. Reload the page and try again.";
    } finally {
      reload.disabled = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const seed = event.submitter === reload ? Number(seedInput.value || 0) + 1 : Number(seedInput.value || 0);
    show(Math.max(0, seed));
  });
  runSelect.addEventListener("change", () => show(0));
})();
