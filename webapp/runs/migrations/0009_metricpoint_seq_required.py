"""Every metric point has its cursor now (0008 numbered the old ones): it is required, and unique in its run."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0008_metricpoint_seq"),
    ]

    operations = [
        migrations.AlterField(
            model_name="metricpoint",
            name="seq",
            field=models.PositiveBigIntegerField(editable=False),
        ),
        migrations.AddConstraint(
            model_name="metricpoint",
            constraint=models.UniqueConstraint(fields=("run", "seq"), name="unique_metric_seq"),
        ),
    ]
