"""Every metric point gets a cursor (MetricPoint.seq, 1, 2, ... per run) and every run the counter
that gives them (Run.metrics_cursor), for the run socket's `?after=<cursor>` (webapp.runs.consumers).

The points stored before are numbered here, run by run, in the order the sink emits them: by
step, and within a step the training point, then the validation point, then any other split (then
by row), so an old run replays in order; its counter is left at its last point's cursor."""
from django.db import migrations, models
from django.db.models import Case, IntegerField, Value, When

BATCH = 2000


def number_points(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    MetricPoint = apps.get_model("runs", "MetricPoint")
    run_ids = MetricPoint.objects.values_list("run_id", flat=True).distinct()
    for run_id in run_ids.iterator():
        split_rank = Case(When(split="train", then=Value(0)), When(split="valid", then=Value(1)), default=Value(2),
                          output_field=IntegerField())
        points = list(MetricPoint.objects.filter(run_id=run_id).order_by("step", split_rank, "id").only("id"))
        for seq, point in enumerate(points, start=1):
            point.seq = seq
        MetricPoint.objects.bulk_update(points, ["seq"], batch_size=BATCH)
        Run.objects.filter(pk=run_id).update(metrics_cursor=len(points))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_checkpointexport_formats"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="metrics_cursor",
            field=models.PositiveBigIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="metricpoint",
            name="seq",
            field=models.PositiveBigIntegerField(editable=False, null=True),
        ),
        migrations.RunPython(number_points, migrations.RunPython.noop, elidable=True),
        # The column becomes required in 0009: PostgreSQL alters no table in the transaction that
        # updated its rows (their foreign-key checks are still pending).
    ]
