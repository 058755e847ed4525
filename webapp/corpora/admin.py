from django.contrib import admin

from webapp.corpora.models import Corpus, CorpusFile, Tokenizer


class TokenizerInline(admin.TabularInline):
    model = Tokenizer
    fields = ("name", "algorithm", "vocab_size", "lowercase", "status", "progress")
    readonly_fields = fields
    extra = 0
    show_change_link = True
    can_delete = False


class CorpusFileInline(admin.TabularInline):
    """The first files (an import may list tens of thousands; the page lists the first 1,000)."""

    model = CorpusFile
    fields = ("position", "name", "path", "format", "compression", "bytes")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False

    def get_queryset(self, request):
        return super().get_queryset(request).filter(position__lt=100)


@admin.register(Corpus)
class CorpusAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "status", "progress", "source_kind", "size_bytes", "original_filename",
                    "created_at")
    list_filter = ("status", "source_kind", "created_at")
    search_fields = ("name", "original_filename", "owner__username", "id")
    readonly_fields = ("id", "size_bytes", "progress", "progress_detail", "stats", "removed", "examples", "preview",
                       "options", "created_at", "original_filename", "source_kind", "text_field", "sources_summary")
    raw_id_fields = ("owner",)
    inlines = [CorpusFileInline, TokenizerInline]


@admin.register(Tokenizer)
class TokenizerAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "corpus", "algorithm", "vocab_size", "lowercase", "status", "created_at")
    list_filter = ("status", "algorithm", "lowercase")
    search_fields = ("name", "owner__username", "corpus__name", "id")
    readonly_fields = ("id", "progress", "progress_detail", "stats", "created_at")
    raw_id_fields = ("owner", "corpus")
