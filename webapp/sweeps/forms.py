"""The sweep form: a base run (its data and settings), the space as text, the search's choices."""
from __future__ import annotations

from django import forms
from django.conf import settings

from webapp.runs.models import Run
from webapp.sweeps.models import Direction, Pruner, Sampler

SPACE_HELP = ("One setting a line: “lr = 1e-4 .. 1e-2 log” (a range; “log” samples it on a log scale), "
              "“batch_size = 8, 16, 32” (values). A single value fixes a setting for every trial "
              "(“max_steps = 200”). The grid sampler takes lists of values only.")


class SweepForm(forms.Form):
    name = forms.CharField(required=False, max_length=200)
    base_run = forms.ModelChoiceField(
        queryset=Run.objects.none(), label="Start every trial from the settings of",
        help_text="One of your runs (pre-training or fine-tuning): its data and its whole config; the space "
                  "below changes some of them per trial.",
        error_messages={"invalid_choice": "That run does not exist, or it is not yours."})
    space = forms.CharField(widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false"}), help_text=SPACE_HELP,
                            initial="lr = 1e-4 .. 3e-3 log\nwarmup_steps = 0, 10")
    metric = forms.CharField(max_length=60, initial="loss",
                             help_text="A validation metric of the runs (pre-training: loss; fine-tuning: the task's, "
                                       "e.g. accuracy or f1). The value of a trial is its last validation's.")
    direction = forms.ChoiceField(choices=Direction.choices, initial=Direction.MINIMIZE)
    sampler = forms.ChoiceField(choices=Sampler.choices, initial=Sampler.TPE)
    pruner = forms.ChoiceField(choices=Pruner.choices, initial=Pruner.NONE)
    prune_after_trials = forms.IntegerField(min_value=0, max_value=100, initial=2,
                                            help_text="Finished trials needed before the pruner stops any.")
    n_trials = forms.IntegerField(label="Trials", min_value=1, max_value=200, initial=8)
    parallelism = forms.IntegerField(min_value=1, initial=2,
                                     help_text="Trials queued or running at once; they spread over every worker.")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0)

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["base_run"].queryset = Run.objects.filter(owner=user).order_by("-created_at")
        self.fields["base_run"].label_from_instance = lambda r: f"{r.name} ({r.get_kind_display().lower()}, {r.preset})"
        self.fields["parallelism"].max_value = settings.MAX_ACTIVE_RUNS_PER_USER
        self.fields["parallelism"].widget.attrs["max"] = settings.MAX_ACTIVE_RUNS_PER_USER
