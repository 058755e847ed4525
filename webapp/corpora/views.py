"""Pages for corpora and tokenizers. Reads go through selectors, writes through services."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.corpora import display
from webapp.corpora.forms import CorpusImportForm, CorpusUploadForm, TokenizerForm, VOCAB_DEFAULT, algorithm_choices
from webapp.corpora.models import Corpus
from webapp.corpora.selectors import corpora_for, corpus_get, tokenizer_get, tokenizers_for
from webapp.corpora.services import (
    corpus_create_demo,
    corpus_create_from_import,
    corpus_create_from_upload,
    corpus_delete,
    import_listing,
    NO_IMPORT_ROOTS,
    tokenizer_create,
    tokenizer_delete,
)
from trainer.prep.corpus import UPLOAD_MAX_DECOMPRESSED_BYTES
from webapp.corpora.uploads import FORMATS_HELP, WRONG_TYPE, accept_attribute, accepted_suffixes
from webapp.jobs.lifecycle import ActionRefused
from webapp.jobs.uploads import form_errors_response, human_bytes, is_xhr


@login_required
def corpus_list(request: HttpRequest) -> HttpResponse:
    return render(request, "corpora/corpus_list.html", {"corpora": corpora_for(request.user)})


@login_required
@require_http_methods(["GET", "POST"])
def corpus_upload(request: HttpRequest) -> HttpResponse:
    form = CorpusUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST":
        if form.is_valid():
            files = form.cleaned_data["file"]
            common = {"owner": request.user, "name": form.cleaned_data["name"], "options": form.options,
                      "text_field": form.cleaned_data["text_field"]}
            if len(files) == 1:
                corpus = corpus_create_from_upload(uploaded_file=files[0], original_filename=files[0].name, **common)
            else:
                corpus = corpus_create_from_upload(uploaded_files=files, **common)
            url = reverse("corpora:detail", args=[corpus.id])
            if is_xhr(request):
                return JsonResponse({"id": str(corpus.id), "redirect": url}, status=201)
            what = f"“{corpus.name}” was uploaded" if len(files) == 1 else f"The {len(files)} files were uploaded"
            messages.success(request, f"{what} and {'is' if len(files) == 1 else 'are'} being processed.")
            return redirect(url)
        if is_xhr(request):
            return form_errors_response(form)
    return _upload_page(request, form=form)


def _upload_page(request: HttpRequest, *, form: CorpusUploadForm | None = None,
                 import_form: CorpusImportForm | None = None, listing: dict | None = None,
                 status: int = 200) -> HttpResponse:
    roots = [str(root) for root in settings.CORPUS_IMPORT_ROOTS]
    return render(request, "corpora/corpus_upload.html", {
        "no_import_roots": NO_IMPORT_ROOTS,
        "form": form or CorpusUploadForm(),
        "import_form": import_form or CorpusImportForm(initial={"text_field": "text"}),
        "import_roots": roots,
        "listing": listing and display.listing(listing),
        "max_bytes": settings.UPLOAD_MAX_BYTES,
        "max_human": human_bytes(settings.UPLOAD_MAX_BYTES),
        "max_unpacked_human": human_bytes(UPLOAD_MAX_DECOMPRESSED_BYTES),
        "accept": accept_attribute(),
        "suffixes": ",".join(accepted_suffixes()),
        "wrong_type": WRONG_TYPE.replace("%(name)s", "{name}"),
        "formats_help": FORMATS_HELP,
    }, status=status)


@login_required
@require_POST
def corpus_import(request: HttpRequest) -> HttpResponse:
    """The upload page's "Import from the server" form: "Find files" (dry_run) lists what the path
    names; "Import" creates the corpus, whose files are read where they are."""
    from trainer.errors import CorpusError

    form = CorpusImportForm(request.POST)
    if not settings.CORPUS_IMPORT_ROOTS:
        form.is_valid()
        form.add_error(None, NO_IMPORT_ROOTS)
        return _upload_page(request, import_form=form)
    if not form.is_valid():
        return _upload_page(request, import_form=form)
    data = form.cleaned_data
    try:
        if data.get("dry_run"):
            return _upload_page(request, import_form=form, listing=import_listing(data["path"]))
        corpus = corpus_create_from_import(owner=request.user, spec=data["path"], name=data["name"],
                                           text_field=data["text_field"], options=form.options)
    except CorpusError as refused:
        form.add_error("path", str(refused))
        return _upload_page(request, import_form=form)
    n = int(corpus.sources_summary.get("files") or 0)
    messages.success(request, f"“{corpus.name}” was imported ({n:,} file{'s' if n != 1 else ''}) and is being "
                              "processed.")
    return redirect("corpora:detail", pk=corpus.id)


@login_required
@require_POST
def corpus_demo(request: HttpRequest) -> HttpResponse:
    corpus = corpus_create_demo(owner=request.user)
    messages.success(request, "The demo corpus is being built from the Python standard library's docstrings.")
    return redirect("corpora:detail", pk=corpus.id)


def _corpus_page(request: HttpRequest, corpus: Corpus, form: TokenizerForm | None = None,
                 status: int = 200) -> HttpResponse:
    if form is None:  # ?algorithm=unigram (the launch form's link for T5) preselects the algorithm
        chosen = request.GET.get("algorithm", "")
        algorithm = chosen if chosen in dict(algorithm_choices()) else "wordpiece"
        form = TokenizerForm(initial={"vocab_size": VOCAB_DEFAULT, "algorithm": algorithm})
    return render(request, "corpora/corpus_detail.html", {
        "corpus": corpus,
        "in_flight": corpus.in_flight,
        "stats": display.corpus_stats(corpus.stats),
        "files": display.corpus_files(corpus),
        "sample": display.sample_line(corpus.stats),
        "removed": display.removed_rows(corpus.removed, corpus.options, corpus.examples),
        "options": display.chosen_rules(corpus.options),
        "tokenizers": tokenizers_for(request.user, corpus=corpus),
        "form": form,
        "size": human_bytes(corpus.size_bytes),
    }, status=status)


@login_required
def corpus_detail(request: HttpRequest, pk) -> HttpResponse:
    return _corpus_page(request, corpus_get(request.user, pk))


@login_required
@require_POST
def tokenizer_new(request: HttpRequest, pk) -> HttpResponse:
    corpus = corpus_get(request.user, pk)
    form = TokenizerForm(request.POST)
    if form.is_valid():
        try:
            tokenizer = tokenizer_create(owner=request.user, corpus=corpus, **form.cleaned_data)
        except ActionRefused as refused:  # the corpus is not ready: the page explains it
            messages.error(request, str(refused))
            return redirect("corpora:detail", pk=corpus.id)
        messages.success(request, f"Training “{tokenizer.name}”.")
        return redirect("corpora:tokenizer-detail", pk=tokenizer.id)
    return _corpus_page(request, corpus, form=form, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def corpus_delete_view(request: HttpRequest, pk) -> HttpResponse:
    corpus = corpus_get(request.user, pk)
    if request.method == "POST":
        try:
            corpus_delete(corpus=corpus)
        except ActionRefused as refused:
            messages.error(request, str(refused))
            return redirect("corpora:detail", pk=corpus.id)
        messages.success(request, f"“{corpus.name}” and its tokenizers were deleted.")
        return redirect("corpora:list")
    return render(request, "corpora/confirm_delete.html", {
        "object": corpus, "kind": "corpus", "cancel_url": reverse("corpora:detail", args=[corpus.id]),
        "also": [t.name for t in corpus.tokenizers.all()], "runs": corpus.runs.count(),
    })


@login_required
def tokenizer_list(request: HttpRequest) -> HttpResponse:
    return render(request, "corpora/tokenizer_list.html", {"tokenizers": tokenizers_for(request.user)})


@login_required
def tokenizer_detail(request: HttpRequest, pk) -> HttpResponse:
    tokenizer = tokenizer_get(request.user, pk)
    return render(request, "corpora/tokenizer_detail.html", {
        "tokenizer": tokenizer,
        "in_flight": tokenizer.in_flight,
        "sample": display.sample_line({"sample": tokenizer.stats.get("sample") or tokenizer.corpus.stats.get("sample")},
                                      trained=True),
        "stats": display.tokenizer_stats(tokenizer.stats),
        "shards": display.shard_rows(tokenizer.stats.get("shards")),
    })


@login_required
@require_http_methods(["GET", "POST"])
def tokenizer_delete_view(request: HttpRequest, pk) -> HttpResponse:
    tokenizer = tokenizer_get(request.user, pk)
    if request.method == "POST":
        try:
            tokenizer_delete(tokenizer=tokenizer)
        except ActionRefused as refused:
            messages.error(request, str(refused))
            return redirect("corpora:tokenizer-detail", pk=tokenizer.id)
        messages.success(request, f"The tokenizer “{tokenizer.name}” was deleted.")
        return redirect("corpora:tokenizer-list")
    return render(request, "corpora/confirm_delete.html", {
        "object": tokenizer, "kind": "tokenizer",
        "cancel_url": reverse("corpora:tokenizer-detail", args=[tokenizer.id]),
        "also": [], "runs": tokenizer.runs.count(),
    })
