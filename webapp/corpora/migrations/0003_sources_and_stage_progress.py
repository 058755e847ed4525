from django.db import migrations, models

DEMO_NAME = "Demo corpus (Python standard library docstrings)"


def mark_demo_corpora(apps, schema_editor):
    """Corpora made before this migration were uploads or the demo (its name and file name tell)."""
    Corpus = apps.get_model("corpora", "Corpus")
    Corpus.objects.filter(name=DEMO_NAME, original_filename="demo.txt").update(source_kind="demo")


class Migration(migrations.Migration):
    """A corpus of many files (issue 28): its files, where they came from (an upload, an import from
    the server, the demo), the JSON field / column holding the text, the running stage of its job and
    examples of the text cleaning removed; a tokenizer's running stage. Existing corpora keep their
    single stored file (raw.txt, ...) and an empty list of files until they are processed again."""

    dependencies = [
        ("corpora", "0002_tokenizer_extra_ids"),
    ]

    operations = [
        migrations.AddField(
            model_name="corpus",
            name="examples",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="corpus",
            name="progress_detail",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="corpus",
            name="source_kind",
            field=models.CharField(choices=[("upload", "Uploaded"), ("import", "Imported from the server"),
                                            ("demo", "Demo")], default="upload", max_length=10),
        ),
        migrations.AddField(
            model_name="corpus",
            name="sources",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="corpus",
            name="text_field",
            field=models.CharField(default="text", max_length=200),
        ),
        migrations.AddField(
            model_name="tokenizer",
            name="progress_detail",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(mark_demo_corpora, migrations.RunPython.noop),
    ]
