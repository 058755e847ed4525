"""Checkpoints get their own owner (imported models have no run), backfilled from the run.

The column becomes NOT NULL in 0003: PostgreSQL refuses to alter a table with pending
(deferred foreign-key) trigger events left by the backfill in the same transaction."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def owners_from_runs(apps, schema_editor):
    Checkpoint = apps.get_model("runs", "Checkpoint")
    Run = apps.get_model("runs", "Run")
    for run_id, owner_id in Run.objects.filter(checkpoints__isnull=False).values_list("id", "owner_id").distinct():
        Checkpoint.objects.filter(run_id=run_id).update(owner_id=owner_id)


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="owner",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="checkpoints", to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(owners_from_runs, migrations.RunPython.noop),
    ]
