"""Which endpoints a checkpoint's server answers, decided in the web process without loading the
model (no torch): from the family registry (trainer.families: generates, masked_lm, sentence
vectors, word vectors, T5's encoder) and, for a fine-tuning run's checkpoint, its task's explorer
action (trainer.finetune). This is what the page offers before the server listens; once it does,
the server's own GET /v1/capabilities (stored on the row by its supervisor) is what counts.
"""
from __future__ import annotations

from webapp.runs.models import Checkpoint

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
FILL_MASK = "/v1/fill-mask"
CLASSIFY = "/v1/text-classification"
TAG = "/v1/token-classification"
ANSWER = "/v1/question-answering"
MODELS = "/v1/models"

# A fine-tuning task's explorer action (trainer.finetune.tasks.Task.explorer_action) -> its endpoints.
BY_ACTION = {"chat": [COMPLETIONS, CHAT], "classify": [CLASSIFY], "tag": [TAG], "answer": [ANSWER]}
ORDER = [COMPLETIONS, CHAT, EMBEDDINGS, FILL_MASK, CLASSIFY, TAG, ANSWER]


def expected_endpoints(checkpoint: Checkpoint) -> list[str]:
    """The /v1 paths the server should answer for this checkpoint (MODELS aside, which every one
    answers); [] when nothing can be told before the server loads it."""
    from trainer import families
    from webapp.explorer import services as explorer

    action = explorer.checkpoint_tool(checkpoint)
    if action:
        return list(BY_ACTION.get(action, []))
    family = families.find(explorer.checkpoint_family(checkpoint))
    if family is None:
        return []
    out = []
    if family.generates:
        out.append(COMPLETIONS)
    if family.word_vectors or family.fills_spans or (family.sentence_vectors and not family.generates):
        out.append(EMBEDDINGS)
    if family.masked_lm and not family.generates:
        out.append(FILL_MASK)
    return out


def shown_endpoints(served) -> tuple[list[str], bool]:
    """(the endpoints a page shows for a server row, whether the server itself reported them)."""
    if served is not None and served.endpoints:
        reported = [e for e in served.endpoints if isinstance(e, str) and e != MODELS]
        return sorted(reported, key=lambda e: ORDER.index(e) if e in ORDER else len(ORDER)), True
    return [], False
