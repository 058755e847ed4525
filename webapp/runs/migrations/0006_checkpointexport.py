"""A checkpoint's Hugging Face export becomes a job (webapp.runs.exports): one row per checkpoint
with its status, progress and error sentence, its zip in the checkpoint's own folder; the row
cascades from the checkpoint (and its run), and its files go with it."""
import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

STATUSES = [("pending", "Waiting for a worker"), ("processing", "Processing"), ("ready", "Ready"),
            ("failed", "Failed")]


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("runs", "0005_run_kind_finetune"),
    ]

    operations = [
        migrations.CreateModel(
            name="CheckpointExport",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ("path", models.CharField(max_length=500)),
                ("status", models.CharField(choices=STATUSES, default="pending", max_length=20)),
                ("progress", models.FloatField(default=0.0)),
                ("error", models.TextField(blank=True)),
                ("architecture", models.CharField(blank=True, max_length=100)),
                ("size_bytes", models.BigIntegerField(default=0)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("checkpoint", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE,
                                                    related_name="hf_export", to="runs.checkpoint")),
                ("owner", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                            related_name="checkpoint_exports", to=settings.AUTH_USER_MODEL)),
            ],
            options={"ordering": ["-created_at"]},
        ),
    ]
