"""The masking inspector: a real collated batch of a run, token by token.

`sample_batch` builds the batch with the engine's own data pipeline (`trainer.training.data.
build_train_stream`, which picks the collator for the run's objectives and masking options),
so whatever masking a run uses — token, whole-word, n-gram, span — is what shows, with no
code here knowing about it. Each token's role is read off the batch itself: a position with
an MLM label was selected; its input says what the collator did with it.

Example dict (one per sequence):
    index        position in the batch
    tokens       [{"token": input token string, "id", "original": the token before corruption,
                   "original_id", "role", "segment": token type id, "span": span id or None}]
                 role: "masked" (became [MASK]), "random" (replaced by a random token), "kept"
                 (selected but left unchanged), "special" ([CLS], [SEP], ...), "none".
                 span: the collator's own spans when its Batch says (`span_ids` (B, T), -1 =
                 none, or SpanBERT's `sbo_pairs`); otherwise runs of two or more adjacent
                 selected tokens get one id (whole words, n-grams; with token masking,
                 neighbours chosen together).
                 Encoder-decoder batches (T5 objectives): "sentinel" (an <extra_id_N> that
                 stands for a span), "masked" (a mask token: BERT-style, text infilling),
                 "special", "none"; causal-LM and biLM batches: "special" or "none" (every
                 token is predicted, nothing is hidden).
    target       encoder-decoder batches only: {"tokens": [{"token", "id", "role": "sentinel" |
                 "special" | "target"}]} the decoder's target; None otherwise
    note         one sentence on what the model predicts for objectives without MLM labels
    pair         None for single segments; for pairs {"task": "nsp" | "sop", "label": 0 | 1,
                 "meaning": "IsNext" | "NotNext" | "in order" | "swapped"}
    counts       {role: number of tokens}
    electra      None unless `checkpoint_dir` holds an ELECTRA model. Extension point: then
                 {"generator": [{"position", "original", "sampled", "replaced"}],
                  "discriminator": [{"position", "token", "replaced", "p_replaced"}],
                  "message": str | None} —
                 the generator's sample at each selected position and the discriminator's
                 verdict per token, from the run's latest checkpoint (`_electra_view`); the
                 message sums them up.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.errors import InferenceError

MAX_EXAMPLES = 16
MAX_SEED = 2**31 - 2  # the seed picks the data epoch (see sample_batch); VALID_VARIANT is 2**31 - 1


def sample_batch(config_dict: dict[str, Any], tokenizer_dir: str | Path, n_examples: int = 4, seed: int = 0,
                 *, checkpoint_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """`n_examples` sequences of the run's training data as its collator makes them.

    `seed` picks the epoch: the batch is the first one of that epoch in the run's own order
    (so seed 0 is what the run trained on first). Same seed, same batch; another seed, new
    pairs (for NSP/SOP) and new masks (dynamic masking; static masking repeats every
    dupe_factor epochs, as in training).
    """
    from trainer.training import data
    from trainer.objectives.examples import SpecialIds
    from trainer.config import RunConfig
    from trainer.prep.tokenization import load_tokenizer

    if not isinstance(n_examples, int) or not 1 <= n_examples <= MAX_EXAMPLES:
        raise InferenceError(f"The inspector shows between 1 and {MAX_EXAMPLES} examples at a time.")
    if not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InferenceError(f"The seed must be a whole number between 0 and {MAX_SEED:,}.")
    # report_to is left out: the inspector reports to no tracker, and a checkpoint trained with one
    # must open on a machine without its package
    settings = {k: v for k, v in dict(config_dict).items() if k != "report_to"}
    config = RunConfig.from_dict(settings).replace(batch_size=n_examples)
    bundle = load_tokenizer(Path(tokenizer_dir))
    special = SpecialIds.from_tokenizer(bundle)
    try:
        stream = data.build_train_stream(config, Path(tokenizer_dir), special, data.DataPosition(epoch=seed),
                                         pack=False)
        batch = stream.next_batch()
    except NotImplementedError:
        raise InferenceError(_cannot_inspect(config)) from None
    except FileNotFoundError:
        raise InferenceError("The run's token shards are no longer on disk, so there is no data to show.") from None
    if getattr(batch, "labels", None) is not None:
        return _sequence_examples(batch, bundle, special, config)
    if getattr(batch, "input_ids", None) is None or getattr(batch, "mlm_labels", None) is None:
        raise InferenceError(_cannot_inspect(config))
    from trainer import objectives

    examples = _examples(batch, bundle, special, objectives.pair_heads(config.objectives))

    inspect = objectives.resolve(config.objectives).inspect  # what the run's model makes of the batch
    electra = inspect(checkpoint_dir, batch, bundle, seed) if inspect and checkpoint_dir is not None else None
    for i, ex in enumerate(examples):
        ex["electra"] = electra[i] if electra else None
    return examples


def _cannot_inspect(config: Any) -> str:
    return (f"The masking inspector cannot show {' + '.join(o.upper() for o in config.objectives)} batches yet: "
            "it reads masked-language-model batches (input ids with MLM labels).")


def _examples(batch: Any, bundle: Any, special: Any, pair_heads: list[Any]) -> list[dict[str, Any]]:
    """Each row of a masked-LM batch as the inspector draws it; `pair_heads` (trainer.objectives.pair_heads of
    the run's objectives) say which pair labels the batch carries and what they mean."""
    from trainer.objectives.masking import IGNORE_INDEX

    ids = batch.input_ids.tolist()
    labels = batch.mlm_labels.tolist()
    types = batch.token_type_ids.tolist() if getattr(batch, "token_type_ids", None) is not None else None
    lengths = batch.attention_mask.sum(dim=1).tolist()
    given_spans = _collator_spans(batch)
    pair_objective, pair_labels = _pair_labels(batch, pair_heads)
    to_token = bundle.tok.id_to_token

    out = []
    for i, n in enumerate(lengths):
        tokens, counts = [], {}
        for t in range(int(n)):
            inp, lab = int(ids[i][t]), int(labels[i][t])
            if lab != IGNORE_INDEX:
                role = "masked" if inp == special.mask else ("kept" if inp == lab else "random")
                orig = lab
            else:
                role = "special" if inp in special.special else "none"
                orig = inp
            counts[role] = counts.get(role, 0) + 1
            tokens.append({"token": to_token(inp), "id": inp, "original": to_token(orig), "original_id": orig,
                           "role": role, "segment": int(types[i][t]) if types else 0, "span": None})
        if given_spans is not None:
            for t, tok in enumerate(tokens):
                tok["span"] = given_spans[i].get(t)
        else:
            _number_runs(tokens)
        pair = None
        if pair_objective is not None:
            label = int(pair_labels[i])
            pair = {"task": pair_objective.name, "label": label, "meaning": pair_objective.pairs.meanings[label]}
        out.append({"index": i, "tokens": tokens, "pair": pair, "counts": counts, "electra": None,
                    "target": None, "note": None})
    return out


def _sequence_examples(batch: Any, bundle: Any, special: Any, config: Any) -> list[dict[str, Any]]:
    """Examples of batches that carry `labels` instead of MLM labels: encoder-decoder denoising
    (input and target shown side by side) and the causal / bidirectional LMs (input only)."""
    from trainer import objectives

    to_token = bundle.tok.id_to_token
    sentinels = set(getattr(special, "sentinels", ()) or ())
    seq2seq = getattr(batch, "decoder_input_ids", None) is not None
    objective = config.objectives[0]

    def role(i: int, in_target: bool) -> str:
        if i in sentinels:
            return "sentinel"
        if i in special.special and not (i == special.mask and not in_target):
            return "special"
        if i == special.mask:
            return "masked"
        return "target" if in_target else "none"

    out = []
    lengths = batch.attention_mask.sum(dim=1).tolist()
    mapping = getattr(batch, "target_mapping", None)  # XLNet: (B, P, T) the targets, in their order
    types = getattr(batch, "token_type_ids", None)
    for i, n in enumerate(lengths):
        ids = [int(x) for x in batch.input_ids[i, : int(n)].tolist()]
        order: dict[int, int] = {}
        if mapping is not None:
            used = (batch.labels[i] != -100).tolist()
            order = {int(pos): rank for rank, pos in enumerate(mapping[i].argmax(-1).tolist()) if used[rank]}
        tokens, counts = [], {}
        for t, inp in enumerate(ids):
            r = "target" if t in order else role(inp, False)
            counts[r] = counts.get(r, 0) + 1
            tokens.append({"token": to_token(inp), "id": inp, "original": to_token(inp), "original_id": inp,
                           "role": r, "segment": min(int(types[i, t]), 1) if types is not None else 0,
                           "span": order.get(t)})
        target = None
        if seq2seq:
            wanted = [int(x) for x in batch.labels[i].tolist() if int(x) != -100]
            target = {"tokens": [{"token": to_token(t), "id": t, "role": role(t, True)} for t in wanted]}
            counts["target"] = len(wanted)
        out.append({"index": i, "tokens": tokens, "pair": None, "counts": counts, "electra": None,
                    "target": target, "note": None if seq2seq else objectives.get(objective).inspector_note or None})
    return out


def _collator_spans(batch: Any) -> list[dict[int, int]] | None:
    """Per row, {position: span id} from the collator itself: its `span_ids` (B, T), -1 = none, or
    the span boundary objective's targets (one row per span token: batch row, left and right
    boundary, position, ...). None when the batch says nothing about spans."""
    span_ids = getattr(batch, "span_ids", None)
    B = int(batch.input_ids.shape[0])
    if span_ids is not None:
        return [{t: int(s) for t, s in enumerate(row) if s >= 0} for row in span_ids.tolist()]
    sbo = getattr(batch, "sbo_pairs", None)
    if sbo is None:
        return None
    spans: list[dict[int, int]] = [{} for _ in range(B)]
    ids: list[dict[tuple[int, int], int]] = [{} for _ in range(B)]
    for row, left, right, position, *_ in sbo.tolist():
        spans[row][position] = ids[row].setdefault((left, right), len(ids[row]))
    return spans


def _number_runs(tokens: list[dict[str, Any]]) -> None:
    """Give each run of two or more adjacent selected tokens one span id (0, 1, ...)."""
    selected = [tok["role"] in ("masked", "random", "kept") for tok in tokens]
    span, t = 0, 0
    while t < len(tokens):
        if not selected[t]:
            t += 1
            continue
        end = t
        while end + 1 < len(tokens) and selected[end + 1]:
            end += 1
        if end > t:
            for k in range(t, end + 1):
                tokens[k]["span"] = span
            span += 1
        t = end + 1


def _pair_labels(batch: Any, pair_heads: list[Any]) -> tuple[Any, list[int]]:
    """(the objective whose pair head the batch trains, its labels), or (None, []) for a batch without."""
    for objective in pair_heads:
        labels = getattr(batch, f"{objective.pairs.head}_labels", None)
        if labels is not None:
            return objective, labels.tolist()
    return None, []


