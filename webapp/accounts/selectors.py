"""Reads for the start page: the getting-started checklists (pretraining, then fine-tuning) and recent work."""
from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser
from django.urls import NoReverseMatch, reverse

from webapp.corpora.selectors import corpora_for, tokenizers_for
from webapp.datasets.selectors import datasets_for
from webapp.jobs.models import JobStatus


def _url(name: str, *args, fallback: str) -> str:
    """Reverse a URL of another app; its pages may not be wired yet in every checkout."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return fallback


@dataclass
class Step:
    number: int
    title: str
    text: str
    done: bool
    url: str
    action: str


@dataclass
class Dashboard:
    steps: list[Step]
    corpora: list = field(default_factory=list)
    tokenizers: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    finetune_steps: list[Step] = field(default_factory=list)
    datasets: list = field(default_factory=list)

    @property
    def is_new(self) -> bool:
        """Nothing made yet (a user who has just signed up): greeted with "Welcome", not "Welcome back"."""
        return not (self.corpora or self.tokenizers or self.runs or self.datasets)

    @property
    def next_step(self) -> Step | None:
        return next((s for s in self.steps if not s.done), None)


def dashboard_for(user: AbstractBaseUser, *, recent: int = 5) -> Dashboard:
    corpora = corpora_for(user)
    tokenizers = tokenizers_for(user)
    runs = user.runs.all().order_by("-created_at")

    ready_corpus = corpora.filter(status=JobStatus.READY).first()
    ready_tokenizer = tokenizers.filter(status=JobStatus.READY).first()
    has_run = runs.exists()
    from webapp.runs.models import Checkpoint, RunKind  # the runs app owns checkpoints and runs

    has_checkpoint = Checkpoint.objects.filter(owner=user).exists()

    new_run_url = _url("runs:new", fallback="/runs/new/")
    if ready_tokenizer is not None:
        new_run_url += f"?tokenizer={ready_tokenizer.id}"
    steps = [
        Step(1, "Add a corpus",
             "Upload a .txt or .jsonl file of your own, or start with the demo corpus.",
             ready_corpus is not None, reverse("corpora:list"), "Go to corpora"),
        Step(2, "Train a tokenizer",
             "Learn a WordPiece vocabulary on a ready corpus and encode it into token shards.",
             ready_tokenizer is not None,
             reverse("corpora:detail", args=[ready_corpus.id]) + "#train-tokenizer" if ready_corpus
             else reverse("corpora:tokenizer-list"),
             "Train a tokenizer"),
        Step(3, "Launch a run",
             "Pick a family and objectives, then follow the training curves live.",
             has_run, new_run_url, "Launch a run"),
        Step(4, "Explore a checkpoint",
             "Fill in masked words and score sentence pairs with the model you trained.",
             has_checkpoint, _url("explorer:index", fallback="/explore/"), "Open the explorer"),
    ]
    recent_runs = [
        {"run": r, "url": _url("runs:detail", r.id, fallback=f"/runs/{r.id}/")} for r in runs[:recent]
    ]
    datasets = datasets_for(user)
    finetune_steps = [
        Step(5, "Add a labelled dataset",
             "Upload a CSV, TSV, JSONL, CoNLL or SQuAD file and map its columns, or start with a demo dataset.",
             datasets.filter(status=JobStatus.READY).exists(), reverse("datasets:list"), "Go to datasets"),
        Step(6, "Fine-tune a checkpoint",
             "Choose a checkpoint (one of your runs' or an imported Hugging Face model) and a ready dataset on the "
             "fine-tune form, then follow the task's scores live.",
             runs.filter(kind=RunKind.FINETUNE).exists(), _url("runs:finetune", fallback="/runs/finetune/"),
             "Fine-tune"),
    ]
    return Dashboard(
        steps=steps,
        corpora=list(corpora[:recent]),
        tokenizers=list(tokenizers.select_related("corpus")[:recent]),
        runs=recent_runs,
        finetune_steps=finetune_steps,
        datasets=list(datasets[:recent]),
    )
