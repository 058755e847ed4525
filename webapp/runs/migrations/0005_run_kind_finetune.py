"""A run is a pre-training run (every existing one) or a fine-tuning run (issue 9): `kind`, the
labelled dataset and the base checkpoint it fine-tunes; a fine-tuning run has no corpus nor
tokenizer (it reads the checkpoint's), so those become optional."""
import django.db.models.deletion
from django.db import migrations, models

KINDS = [("pretrain", "Pre-training"), ("finetune", "Fine-tuning")]


def _optional(to: str, related_name: str, on_delete) -> models.ForeignKey:
    return models.ForeignKey(blank=True, null=True, on_delete=on_delete, related_name=related_name, to=to)


class Migration(migrations.Migration):
    dependencies = [
        ("corpora", "0002_tokenizer_extra_ids"),
        ("datasets", "0001_initial"),
        ("runs", "0004_run_family"),
    ]

    operations = [
        migrations.AddField("run", "kind", models.CharField(choices=KINDS, default="pretrain", max_length=10)),
        migrations.AddField("run", "dataset", _optional("datasets.dataset", "runs",
                                                        django.db.models.deletion.SET_NULL)),
        migrations.AddField("run", "base_checkpoint", _optional("runs.checkpoint", "finetune_runs",
                                                                django.db.models.deletion.SET_NULL)),
        migrations.AlterField("run", "corpus", _optional("corpora.corpus", "runs", django.db.models.deletion.PROTECT)),
        migrations.AlterField("run", "tokenizer", _optional("corpora.tokenizer", "runs",
                                                            django.db.models.deletion.PROTECT)),
    ]
