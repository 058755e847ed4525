from django.db import migrations, models


class Migration(migrations.Migration):
    """T5 sentinel tokens (<extra_id_0> ...) on a tokenizer; existing tokenizers have none."""

    dependencies = [
        ("corpora", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="tokenizer",
            name="extra_ids",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
