"""Run.architecture becomes Run.family: one name for the model family across the project."""
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_checkpoint_source_name")]

    operations = [migrations.RenameField(model_name="run", old_name="architecture", new_name="family")]
