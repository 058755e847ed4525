"""A tokenizer job stopped after its training resumes when queued again: it keeps the trained
tokenizer and encodes only the pieces it had not finished."""
from __future__ import annotations

import pytest

from tests.webapp.test_tokenizers import ready_corpus  # noqa: F401 (a fixture)
from trainer.prep import shards
from webapp.corpora import services
from webapp.corpora.models import Tokenizer
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db


def test_a_stopped_tokenizer_job_keeps_its_training_and_resumes_the_encode(alice, ready_corpus, monkeypatch):  # noqa: F811
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=ready_corpus, name="t", vocab_size=300)
    # pieces of 2,000 bytes: both bounds, or the 1 MB floor makes the fixture's text one piece a split
    monkeypatch.setattr(shards, "PIECE_BYTES", 2000)
    monkeypatch.setattr(shards, "MIN_PIECE_BYTES", 2000)
    real = shards._encode_part
    calls = []

    def killed_after_two(*args, **kw):
        if len(calls) == 2:
            raise SystemExit("the worker was stopped")  # as a warm shutdown ends a task: not an Exception
        calls.append(args[2])
        return real(*args, **kw)

    monkeypatch.setattr(shards, "_encode_part", killed_after_two)
    monkeypatch.setattr(services, "_fail", lambda *a, **k: None)
    with pytest.raises(SystemExit):
        services.tokenizer_process(tokenizer_id=tokenizer.id)
    work = tokenizer.folder.with_name(f".{tokenizer.folder.name}.tmp")
    assert (work / services.TRAINED_MARK).is_file()
    vocab = (work / "tokenizer.json").read_bytes()

    import trainer.prep.tokenization as tokenization

    monkeypatch.setattr(tokenization, "train_tokenizer", lambda *a, **k: pytest.fail("trained again"))
    again = []
    monkeypatch.setattr(shards, "_encode_part", lambda *a, **k: again.append(a[2]) or real(*a, **k))
    Tokenizer.objects.filter(pk=tokenizer.pk).update(status=JobStatus.PENDING)
    services.tokenizer_process(tokenizer_id=tokenizer.id)
    tokenizer.refresh_from_db()
    assert tokenizer.status == JobStatus.READY, tokenizer.error
    assert (tokenizer.folder / "tokenizer.json").read_bytes() == vocab
    assert not (tokenizer.folder / services.TRAINED_MARK).exists() and not work.exists()
    n_pieces = sum(len(shards._document_ranges(ready_corpus.folder / f"{s}.txt", 2000)) for s in ("train", "valid"))
    assert len(again) == n_pieces - 2
