import django.db.models.deletion
from django.db import migrations, models

FORMAT_ORDER = ("txt", "jsonl", "parquet", "arrow", "none", "gzip", "zstd", "bz2")  # trainer.prep.sources


def _summary(entries):
    """trainer.prep.sources.describe of the listed files, written here so the migration does not
    change when the trainer does."""
    formats, compressions = {}, {}
    for e in entries:
        formats[e.get("format", "")] = formats.get(e.get("format", ""), 0) + 1
        compressions[e.get("compression", "none")] = compressions.get(e.get("compression", "none"), 0) + 1
    order = {k: i for i, k in enumerate(FORMAT_ORDER)}
    return {"files": len(entries), "bytes": sum(int(e.get("bytes") or 0) for e in entries),
            "formats": dict(sorted(formats.items(), key=lambda kv: order.get(kv[0], 99))),
            "compressions": dict(sorted(compressions.items(), key=lambda kv: order.get(kv[0], 99)))}


def rows_from_lists(apps, schema_editor):
    """Each corpus's list of files becomes its CorpusFile rows, in the same order, and their totals."""
    Corpus = apps.get_model("corpora", "Corpus")
    CorpusFile = apps.get_model("corpora", "CorpusFile")
    for corpus in Corpus.objects.exclude(sources=[]).iterator():
        entries = [e for e in corpus.sources or [] if isinstance(e, dict)]
        CorpusFile.objects.bulk_create(
            (CorpusFile(corpus=corpus, position=i, name=str(e.get("name") or ""), path=str(e.get("path") or ""),
                        format=str(e.get("format") or ""), compression=str(e.get("compression") or "none"),
                        bytes=int(e.get("bytes") or 0)) for i, e in enumerate(entries)), batch_size=1000)
        Corpus.objects.filter(pk=corpus.pk).update(sources_summary=_summary(entries))


def lists_from_rows(apps, schema_editor):
    Corpus = apps.get_model("corpora", "Corpus")
    CorpusFile = apps.get_model("corpora", "CorpusFile")
    for corpus in Corpus.objects.iterator():
        rows = CorpusFile.objects.filter(corpus=corpus).order_by("position")
        Corpus.objects.filter(pk=corpus.pk).update(sources=[
            {"path": r.path, "name": r.name, "format": r.format, "compression": r.compression, "bytes": r.bytes}
            for r in rows])


class Migration(migrations.Migration):
    """A corpus's files move from a JSON list on its row (an import of tens of thousands of shards
    made the row megabytes, read whole by every list page and API answer) to CorpusFile rows; the
    row keeps their totals (sources_summary)."""

    dependencies = [
        ("corpora", "0003_sources_and_stage_progress"),
    ]

    operations = [
        migrations.AddField(
            model_name="corpus",
            name="sources_summary",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.CreateModel(
            name="CorpusFile",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("position", models.PositiveIntegerField()),
                ("name", models.TextField()),
                ("path", models.TextField(blank=True)),
                ("format", models.CharField(max_length=20)),
                ("compression", models.CharField(default="none", max_length=10)),
                ("bytes", models.BigIntegerField(default=0)),
                ("corpus", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="files",
                                             to="corpora.corpus")),
            ],
            options={
                "ordering": ["corpus", "position"],
                "constraints": [models.UniqueConstraint(fields=("corpus", "position"), name="corpus_file_position")],
            },
        ),
        migrations.RunPython(rows_from_lists, lists_from_rows),
        migrations.RemoveField(
            model_name="corpus",
            name="sources",
        ),
    ]
