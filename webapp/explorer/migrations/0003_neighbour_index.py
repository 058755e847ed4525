import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('datasets', '0001_initial'),
        ('explorer', '0002_incontext_result'),
        ('runs', '0005_run_kind_finetune'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='NeighbourIndex',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('pooling', models.CharField(max_length=10)),
                ('status', models.CharField(choices=[('pending', 'Waiting for a worker'), ('processing', 'Processing'), ('ready', 'Ready'), ('failed', 'Failed')], default='pending', max_length=20)),
                ('progress', models.FloatField(default=0.0)),
                ('error', models.TextField(blank=True)),
                ('limit', models.PositiveIntegerField()),
                ('count', models.PositiveIntegerField(default=0)),
                ('total', models.PositiveIntegerField(default=0)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('checkpoint', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='neighbour_indexes', to='runs.checkpoint')),
                ('dataset', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='neighbour_indexes', to='datasets.dataset')),
                ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='neighbour_indexes', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created_at'],
                'constraints': [models.UniqueConstraint(fields=('checkpoint', 'dataset', 'pooling'), name='one_neighbour_index_per_checkpoint_dataset_pooling')],
            },
        ),
    ]
