"""A corpus imported from the server in the system Chromium (issue 28): a folder of mixed shards (a
Parquet file, a jsonl.zst and a json.gz) under an allowed root; "Find files" lists the three with their
formats before anything is imported; "Import 3 files" makes the corpus, which becomes ready; a WordPiece
tokenizer trained on it becomes ready too. Django serves the pages from a thread of this process
(live_server), where the import root is set, and the jobs run in it as soon as they are committed
(Celery eager). Screenshots: test-artifacts/screenshots/corpus-import-*.png."""
from __future__ import annotations

import gzip

import pytest

from tests.webapp.test_corpora_sources import documents, jsonl, parquet, zst

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def shards(tmp_path, settings):
    root = tmp_path / "datasets"
    folder = root / "crawl-2024" / "shards"
    folder.mkdir(parents=True)
    (folder / "shard-00000.parquet").write_bytes(parquet(documents(n=8, seed=31)))
    (folder / "shard-00001.jsonl.zst").write_bytes(zst(jsonl(documents(n=8, seed=32))))
    (folder / "shard-00002.json.gz").write_bytes(gzip.compress(jsonl(documents(n=8, seed=33))))
    settings.CORPUS_IMPORT_ROOTS = [root]
    return folder


def test_import_a_folder_of_mixed_shards_and_train_a_tokenizer(eager, shards, alice_cookie, live_server_page, shots):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto("/corpora/upload/")
    assert page.is_hidden("#import-submit")

    # A path outside the allowed folder: the sentence beside the field, nothing listed.
    page.fill("#id_import-path", str(shards.parent.parent.parent))
    page.click("#import-find")
    page.wait_for_selector("[data-field=path].has-error .errorlist li")
    assert page.inner_text("[data-field=path] .errorlist li").endswith(".")
    assert page.is_hidden("#import-submit")

    page.fill("#id_import-path", str(shards))
    page.click("#import-find")
    page.wait_for_selector("#import-listing table")
    rows = page.eval_on_selector_all(
        "#import-listing tbody tr", "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].dataset.format, "
                                    "r.cells[2].textContent])")
    assert rows == [["shard-00000.parquet", "parquet", "—"], ["shard-00001.jsonl.zst", "jsonl", "zstd"],
                    ["shard-00002.json.gz", "jsonl", "gzip"]]
    assert page.inner_text("#import-listing .import-summary").startswith("3 files, ")
    button = page.inner_text("#import-submit")
    assert button.startswith("Import 3 files (") and button.endswith(" KB)")
    page.fill("#id_import-name", "Crawl shards")
    page.screenshot(path=str(shots / "corpus-import-listing.png"), full_page=True)

    page.click("#import-submit")  # ingested in the same request (eager): the corpus page opens ready
    page.wait_for_url("**/corpora/*/")
    page.wait_for_selector("#status-badge.ready", timeout=120_000)
    assert "Crawl shards" in page.inner_text("h1")
    assert page.eval_on_selector_all("#corpus-files tbody tr", "rows => rows.length") == 3
    assert "read in place on the server, never copied" in page.inner_text("#corpus-files")
    page.screenshot(path=str(shots / "corpus-import-ready.png"), full_page=True)

    page.fill("#id_vocab_size", "200")
    page.select_option("#id_algorithm", "wordpiece")
    page.click("text=Train tokenizer")
    page.wait_for_url("**/corpora/tokenizers/*/")
    page.wait_for_selector(".badge.ready", timeout=120_000)
    assert "wordpiece" in page.inner_text("main")
