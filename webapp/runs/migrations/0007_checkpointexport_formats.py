"""A checkpoint gets one export per format (hf, onnx, gguf) instead of one in all: the one-to-one
link becomes a foreign key with a unique (checkpoint, format), and each row names its format and
the license its model card names. Existing rows are Hugging Face exports ("hf", license "other");
they keep their folder (exports/, the zip exports/hf.zip), which is where their archive stays."""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_checkpointexport"),
    ]

    operations = [
        migrations.AlterField(
            model_name="checkpointexport",
            name="checkpoint",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="exports",
                                    to="runs.checkpoint"),
        ),
        migrations.AddField(
            model_name="checkpointexport",
            name="format",
            field=models.CharField(choices=[("hf", "Hugging Face transformers"), ("onnx", "ONNX"), ("gguf", "GGUF")],
                                   default="hf", max_length=10),
        ),
        migrations.AddField(
            model_name="checkpointexport",
            name="license",
            field=models.CharField(default="other", max_length=40),
        ),
        migrations.AddConstraint(
            model_name="checkpointexport",
            constraint=models.UniqueConstraint(fields=("checkpoint", "format"), name="one_export_per_format"),
        ),
    ]
