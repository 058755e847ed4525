"""Checkpoint.owner is required; run becomes optional (an imported model has none) and
source/name say where a checkpoint came from."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0002_checkpoint_owner_source"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="checkpoint",
            name="owner",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="checkpoints",
                                    to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name="checkpoint",
            name="run",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="checkpoints", to="runs.run"),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="source",
            field=models.CharField(choices=[("run", "Training run"), ("import", "Imported")], default="run",
                                   max_length=10),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="name",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="checkpoint",
            name="step",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddConstraint(
            model_name="checkpoint",
            constraint=models.CheckConstraint(condition=models.Q(("source", "import"), ("run__isnull", False),
                                                                 _connector="OR"),
                                              name="checkpoint_of_a_run_or_imported"),
        ),
    ]
