from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("datasets", "0002_dataset_files"),
    ]

    operations = [
        migrations.AddField(
            model_name="dataset",
            name="baselines",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
