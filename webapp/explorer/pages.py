"""The explorer page's answers without JavaScript: each tool's `page` (webapp.explorer.tools) turns the
cleaned ExploreForm into what its panel template draws. `page(data, selected, compare_to, user)`
returns a dict; views.index adds {"kind": the tool's name}. With JavaScript the page asks the JSON API
instead and draws the same answers in place.
"""
from __future__ import annotations

from typing import Any

from webapp.datasets.selectors import dataset_get
from webapp.explorer import incontext, neighbours, services
from webapp.explorer.forms import form_decoding
from webapp.explorer.tools import Comparison
from webapp.runs.models import Checkpoint


def alone(selected: Checkpoint, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """One checkpoint's answer as the page's single column (what _columns.html draws)."""
    return [{"checkpoint": str(selected.id), "label": selected.label, "result": answer, "error": None}]


def compared(comparison: Comparison, inputs):
    """A page answer for a tool that compares (its Comparison): `comparison.ask(selected, inputs(data))`
    alone, or both checkpoints side by side; `inputs(data)` are the compare API's inputs."""
    def page(data: dict, selected: Checkpoint, compare_to: Checkpoint | None, user) -> dict[str, Any]:
        asked = inputs(data)
        if compare_to is not None:
            return {"columns": services.compare(checkpoints=[selected, compare_to], task=comparison.task,
                                                inputs=asked)}
        answer = comparison.ask(selected, asked)
        return {**answer, "columns": alone(selected, answer)}
    return page


def _text_inputs(data: dict) -> dict[str, Any]:
    return {k: data.get(k) for k in ("text", "top_k", "text_a", "text_b")}


# How the tools that compare ask each checkpoint, in the compare API's inputs (tools.Comparison).
FILL_MASK = Comparison("fill-mask", ("text",), lambda c, i: {
    "masks": services.fill_mask(checkpoint=c, text=i.get("text") or "", top_k=i.get("top_k") or 5)})
NEXT_SENTENCE = Comparison("next-sentence", ("text_a", "text_b"), lambda c, i: services.next_sentence(
    checkpoint=c, text_a=i.get("text_a") or "", text_b=i.get("text_b") or ""))
SENTENCE_ORDER = Comparison("sentence-order", ("text_a", "text_b"), lambda c, i: services.sentence_order(
    checkpoint=c, text_a=i.get("text_a") or "", text_b=i.get("text_b") or ""))
CLASSIFY = Comparison("classify", ("text",), lambda c, i: services.classify(  # two fine-tuned classifiers
    checkpoint=c, text=i.get("text") or "", text_b=i.get("text_b") or ""))   # (or steps of one run)

fill_mask = compared(FILL_MASK, _text_inputs)
next_sentence = compared(NEXT_SENTENCE, _text_inputs)
sentence_order = compared(SENTENCE_ORDER, _text_inputs)
classify = compared(CLASSIFY, lambda data: {"text": data["classify_text"], "text_b": data.get("classify_text_b") or ""})


# ---------------------------------------------------------------------------- the first checkpoint only
def text_to_text(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    return services.generate(checkpoint=selected, prompt=data["prompt"], decoding=form_decoding(data))


def generate(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    # The box is offered (and ticked) for SFT checkpoints only; elsewhere a ticked box is not a question.
    chat = bool(data.get("gen_chat")) and services.checkpoint_tool(selected) == "chat"
    out = services.generate(checkpoint=selected, prompt=data["gen_prompt"], decoding=form_decoding(data), chat=chat)
    return {**out, "prompt": data["gen_prompt"].strip(), "chat": chat}


def generate_seq2seq(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    """UniLM's target for a source, decoded as the Decoding card says."""
    return services.generate_target(checkpoint=selected, source=data["source"], decoding=form_decoding(data))


def fill_spans(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    return services.fill_spans(checkpoint=selected, text=data["span_text"], decoding=form_decoding(data))


def word_similarity(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    return services.word_similarity(checkpoint=selected, sentence_a=data["sentence_a"],
                                    sentence_b=data["sentence_b"], word=data["word"])


# ---------------------------------------------------------------------------- fine-tuned and encoder panels
# Probabilities as a table, entities and the answer marked in the text, similarities as a table.
def marked(text: str, spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The text cut into pieces [{"text", "mark": bool, "type"}], the spans (sorted by start, any
    that overlaps an earlier one left out) marked: what the template wraps in <mark>."""
    pieces, at = [], 0
    for span in sorted(spans, key=lambda s: s["start"]):
        start, end = int(span["start"]), int(span["end"])
        if start < at or end <= start:
            continue
        if start > at:
            pieces.append({"text": text[at:start], "mark": False, "type": ""})
        pieces.append({"text": text[start:end], "mark": True, "type": span.get("type", "")})
        at = end
    if at < len(text):
        pieces.append({"text": text[at:], "mark": False, "type": ""})
    return pieces


def choose(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    return services.choose(checkpoint=selected, context=data["choose_context"],
                           choices=data["choose_choices"].splitlines())


def tag(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    text = data["tag_text"].strip()
    out = services.tag(checkpoint=selected, text=text)
    return {**out, "pieces": marked(text, out["entities"])}


def answer(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    context = data["qa_context"].strip()
    out = services.answer(checkpoint=selected, question=data["qa_question"], context=context,
                          n_best=data["qa_n_best"])
    found = out["answer"]
    return {**out, "pieces": marked(context, [found] if found["text"] else [])}


def embed(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    out = services.embed(checkpoint=selected, sentences=data["embed_sentences"].splitlines(),
                         pooling=data["embed_pooling"])
    return {**out, "rows": [{"sentence": s, "cells": row} for s, row in zip(out["sentences"], out["similarity"])]}


def neighbours_index(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["nn_dataset"])  # 404 for another user's
    index = neighbours.index_start(owner=user, checkpoint=selected, dataset=dataset, pooling=data["nn_pooling"])
    index.refresh_from_db()
    return {"index": index}


def neighbours_search(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["nn_dataset"])  # 404 for another user's
    return {**neighbours.search(checkpoint=selected, dataset=dataset, pooling=data["nn_pooling"],
                                text=data["nn_text"], k=data["nn_k"]), "dataset_name": dataset.name}


def _icl_settings(data: dict) -> dict[str, Any]:
    return {"template": data["icl_template"], "separator": incontext.DEFAULT_SEPARATOR, "seed": data["icl_seed"],
            "normalise": bool(data.get("icl_normalise"))}


def prompt_builder(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["icl_dataset"])  # 404 for another user's
    return incontext.score_prompt(checkpoint=selected, dataset=dataset, settings=_icl_settings(data),
                                  k=data["icl_k"], index=data["icl_index"])


def incontext_accuracy(data: dict, selected: Checkpoint, compare_to, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["icl_dataset"])  # 404 for another user's
    out = incontext.evaluate(owner=user, checkpoint=selected, dataset=dataset, settings=_icl_settings(data),
                             k_max=data["icl_kmax"], n_queries=data["icl_queries"])
    return {**out, "rows": [(k, f"{100 * a:.1f}%") for k, a in zip(out["k"], out["accuracy"])]}
