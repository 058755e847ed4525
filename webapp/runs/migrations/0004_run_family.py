"""Run.architecture becomes Run.family: one name for the model family across the project. The
stored run configs get the same key (trainer.config.RunConfig reads the old one too)."""
from django.db import migrations


def rename_config_key(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    for run in Run.objects.filter(config__has_key="architecture").only("id", "config"):
        config = dict(run.config)
        config.setdefault("family", config.pop("architecture"))
        Run.objects.filter(pk=run.pk).update(config=config)


def restore_config_key(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    for run in Run.objects.filter(config__has_key="family").only("id", "config"):
        config = dict(run.config)
        config.setdefault("architecture", config.pop("family"))
        Run.objects.filter(pk=run.pk).update(config=config)


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_checkpoint_source_name")]

    operations = [
        migrations.RenameField(model_name="run", old_name="architecture", new_name="family"),
        migrations.RunPython(rename_config_key, restore_config_key),
    ]
