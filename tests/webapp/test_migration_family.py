"""Migrations that move data: runs.0004 (Run.architecture becomes Run.family, in the column and in the
stored config) and corpora.0004 (a corpus's list of files becomes rows)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def _newest_before(graph, leaf, migration):
    """The newest migration of leaf's app that does not need `migration` ((app, None): none)."""
    node = leaf
    while node is not None and migration in graph.forwards_plan(node):
        parents = [p for p in graph.node_map[node].parents if p.key[0] == node[0]]
        node = parents[0].key if parents else None
    return node if node is not None else (leaf[0], None)


@pytest.mark.django_db(transaction=True)
def test_old_runs_keep_their_family():
    executor = MigrationExecutor(connection)
    others = [_newest_before(executor.loader.graph, leaf, ("runs", "0004_run_family"))
              for leaf in executor.loader.graph.leaf_nodes() if leaf[0] != "runs"]
    before, after = [("runs", "0003_checkpoint_source_name"), *others], [("runs", "0004_run_family"), *others]
    executor.migrate(before)
    apps = executor.loader.project_state([n for n in before if n[1] is not None]).apps
    User = apps.get_model("auth", "User")
    Corpus, Tokenizer = apps.get_model("corpora", "Corpus"), apps.get_model("corpora", "Tokenizer")
    Run = apps.get_model("runs", "Run")
    owner = User.objects.create(username="old")
    corpus = Corpus.objects.create(owner=owner, name="c", original_filename="c.txt")
    tokenizer = Tokenizer.objects.create(owner=owner, corpus=corpus, name="t")
    run = Run.objects.create(owner=owner, name="old run", corpus=corpus, tokenizer=tokenizer, architecture="roberta",
                             preset="roberta-tiny", objectives=["mlm"],
                             config={"architecture": "roberta", "preset": "roberta-tiny", "objectives": ["mlm"]})
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    Run = executor.loader.project_state([n for n in after if n[1] is not None]).apps.get_model("runs", "Run")
    migrated = Run.objects.get(pk=run.pk)
    assert migrated.family == "roberta"
    assert migrated.config == {"family": "roberta", "preset": "roberta-tiny", "objectives": ["mlm"]}
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_a_corpus_list_of_files_becomes_its_file_rows_in_order():
    """corpora.0004: Corpus.sources (a JSON list) becomes CorpusFile rows and sources_summary."""
    executor = MigrationExecutor(connection)
    new = ("corpora", "0004_corpus_files")
    others = [_newest_before(executor.loader.graph, leaf, new)
              for leaf in executor.loader.graph.leaf_nodes() if leaf[0] != "corpora"]
    before, after = [("corpora", "0003_sources_and_stage_progress"), *others], [new, *others]
    executor.migrate(before)
    apps = executor.loader.project_state([n for n in before if n[1] is not None]).apps
    owner = apps.get_model("auth", "User").objects.create(username="old")
    Corpus = apps.get_model("corpora", "Corpus")
    listed = [{"path": f"/data/{i}.jsonl.zst", "name": f"{i}.jsonl.zst", "format": "jsonl", "compression": "zstd",
               "bytes": 10 + i} for i in range(3)] + [{"path": "/data/p.parquet", "name": "p.parquet",
                                                       "format": "parquet", "compression": "none", "bytes": 5}]
    many = Corpus.objects.create(owner=owner, name="many", sources=listed, source_kind="import")
    none = Corpus.objects.create(owner=owner, name="old upload", original_filename="c.txt")
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    apps = executor.loader.project_state([n for n in after if n[1] is not None]).apps
    Corpus, CorpusFile = apps.get_model("corpora", "Corpus"), apps.get_model("corpora", "CorpusFile")
    rows = CorpusFile.objects.filter(corpus_id=many.pk).order_by("position")
    assert [(r.position, r.path, r.name, r.format, r.compression, r.bytes) for r in rows] == [
        (i, e["path"], e["name"], e["format"], e["compression"], e["bytes"]) for i, e in enumerate(listed)]
    assert Corpus.objects.get(pk=many.pk).sources_summary == {
        "files": 4, "bytes": 38, "formats": {"jsonl": 3, "parquet": 1}, "compressions": {"none": 1, "zstd": 3}}
    assert not CorpusFile.objects.filter(corpus_id=none.pk).exists()
    assert Corpus.objects.get(pk=none.pk).sources_summary == {}
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
