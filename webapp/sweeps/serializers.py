"""API shapes of sweeps and their trials (also the OpenAPI schema's components)."""
from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.api.serializers import RequestSerializer
from webapp.sweeps.models import Direction, Pruner, Sampler, Sweep, Trial


class TrialSerializer(serializers.ModelSerializer):
    run = serializers.UUIDField(source="run_id", read_only=True, allow_null=True)
    run_status = serializers.SerializerMethodField()
    run_url = serializers.SerializerMethodField()
    step = serializers.SerializerMethodField()
    max_steps = serializers.SerializerMethodField()
    last_value = serializers.SerializerMethodField(help_text="The metric at the trial's latest validation.")

    class Meta:
        model = Trial
        fields = ["number", "state", "params", "value", "last_value", "intermediate", "note", "run", "run_status",
                  "run_url", "step", "max_steps"]
        read_only_fields = fields

    def get_run_status(self, obj: Trial) -> str | None:
        return obj.run.status if obj.run else None

    def get_run_url(self, obj: Trial) -> str | None:
        return reverse("runs:detail", args=[obj.run_id]) if obj.run_id else None

    def get_step(self, obj: Trial) -> int | None:
        return obj.run.current_step if obj.run else None

    def get_max_steps(self, obj: Trial) -> int | None:
        return obj.run.max_steps if obj.run else None

    def get_last_value(self, obj: Trial) -> float | None:
        if obj.value is not None:
            return obj.value
        if not obj.intermediate:
            return None
        return obj.intermediate[max(obj.intermediate, key=int)]


class SweepSerializer(serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    best_trial = serializers.SerializerMethodField()
    best_value = serializers.SerializerMethodField()
    best_checkpoint = serializers.SerializerMethodField()
    trials = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Sweep
        fields = ["id", "name", "kind", "status", "status_label", "error", "metric", "direction", "sampler", "pruner",
                  "prune_after_trials", "n_trials", "parallelism", "seed", "space", "base", "best_trial",
                  "best_value", "best_checkpoint", "trials", "url", "created_at", "finished_at"]
        read_only_fields = fields

    def get_best_trial(self, obj: Sweep) -> int | None:
        return obj.best_trial.number if obj.best_trial else None

    def get_best_value(self, obj: Sweep) -> float | None:
        return obj.best_trial.value if obj.best_trial else None

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "id": {"type": "string"}, "step": {"type": "integer"}, "explore_url": {"type": "string"}}})
    def get_best_checkpoint(self, obj: Sweep) -> dict | None:
        from webapp.sweeps import selectors

        ckpt = selectors.best_checkpoint(obj, self._trials(obj))
        if ckpt is None:
            return None
        return {"id": str(ckpt.id), "step": ckpt.step, "explore_url": f"{reverse('explorer:index')}?checkpoint={ckpt.id}"}

    @extend_schema_field(TrialSerializer(many=True))
    def get_trials(self, obj: Sweep) -> list[dict]:
        return TrialSerializer(self._trials(obj), many=True).data

    def get_url(self, obj: Sweep) -> str:
        return reverse("sweeps:detail", args=[obj.id])

    def _trials(self, obj: Sweep) -> list[Trial]:
        from webapp.sweeps import selectors

        if not hasattr(obj, "_trial_list"):
            obj._trial_list = selectors.trials_of(obj)
        return obj._trial_list


class SweepListSerializer(serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    trials_done = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Sweep
        fields = ["id", "name", "kind", "status", "status_label", "metric", "direction", "sampler", "n_trials",
                  "trials_done", "url", "created_at"]
        read_only_fields = fields

    def get_trials_done(self, obj: Sweep) -> int:
        return obj.trials.exclude(state="running").count()

    def get_url(self, obj: Sweep) -> str:
        return reverse("sweeps:detail", args=[obj.id])


class SweepCreateSerializer(RequestSerializer):
    """POST /api/sweeps/: what every trial starts from (one of your runs, or the fields of
    POST /api/runs/ or POST /api/finetune/ as `base`), the space, the metric and the search."""

    name = serializers.CharField(required=False, allow_blank=True, max_length=200)
    base_run = serializers.UUIDField(required=False, help_text="One of your runs: its data and whole config.")
    base = serializers.DictField(required=False, help_text=(
        "Instead of base_run: the body of POST /api/runs/ (pre-training: tokenizer, family, preset, ...) or of "
        "POST /api/finetune/ (fine-tuning: checkpoint, dataset, ...)."))
    space = serializers.JSONField(help_text=(
        'A list of settings: {"name": "lr", "low": 1e-4, "high": 1e-2, "log": true} or {"name": "batch_size", '
        '"values": [8, 16]}; or the form\'s text ("lr = 1e-4 .. 1e-2 log", one setting a line).'))
    metric = serializers.CharField(required=False, default="loss", max_length=60, help_text="A validation metric of the runs.")
    direction = serializers.ChoiceField(choices=Direction.values, required=False, default=Direction.MINIMIZE)
    sampler = serializers.ChoiceField(choices=Sampler.values, required=False, default=Sampler.TPE)
    pruner = serializers.ChoiceField(choices=Pruner.values, required=False, default=Pruner.NONE)
    prune_after_trials = serializers.IntegerField(required=False, default=2, min_value=0, max_value=100)
    n_trials = serializers.IntegerField(required=False, default=8, min_value=1, max_value=200)
    parallelism = serializers.IntegerField(required=False, default=2, min_value=1, max_value=64)
    seed = serializers.IntegerField(required=False, default=0, min_value=0, max_value=2**31 - 1)

    def validate(self, attrs):
        if ("base_run" in attrs) == ("base" in attrs):
            raise serializers.ValidationError("Give either base_run (one of your runs) or base (a run's fields).")
        return attrs
