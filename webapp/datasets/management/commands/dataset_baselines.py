"""manage.py dataset_baselines: compute the baselines of ready datasets stored before they existed."""
from django.core.management.base import BaseCommand

from webapp.datasets.models import Dataset
from webapp.datasets.services import dataset_baselines
from webapp.jobs.models import JobStatus


class Command(BaseCommand):
    help = ("Compute the baselines (trainer.finetune.baselines) of every ready dataset that has none yet; "
            "--all computes them again for every ready dataset.")

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="Recompute them for every ready dataset.")

    def handle(self, *args, **options):
        datasets = Dataset.objects.filter(status=JobStatus.READY)
        if not options["all"]:
            datasets = datasets.filter(baselines={})
        count = 0
        for dataset in datasets.iterator():
            Dataset.objects.filter(pk=dataset.pk).update(baselines=dataset_baselines(dataset.data_dir))
            count += 1
        self.stdout.write(f"Computed the baselines of {count} dataset{'s' if count != 1 else ''}.")
