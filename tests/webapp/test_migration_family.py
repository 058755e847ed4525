"""Migration runs.0004: Run.architecture becomes Run.family, in the column and in the stored config."""
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
