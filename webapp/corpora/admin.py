from django.contrib import admin

from webapp.corpora.models import Corpus, Tokenizer


class TokenizerInline(admin.TabularInline):
    model = Tokenizer
    fields = ("name", "algorithm", "vocab_size", "lowercase", "status", "progress")
    readonly_fields = fields
    extra = 0
    show_change_link = True
    can_delete = False


@admin.register(Corpus)
class CorpusAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "status", "progress", "source_kind", "size_bytes", "original_filename",
                    "created_at")
    list_filter = ("status", "source_kind", "created_at")
    search_fields = ("name", "original_filename", "owner__username", "id")
    readonly_fields = ("id", "size_bytes", "progress", "progress_detail", "stats", "removed", "examples", "preview",
                       "options", "created_at", "original_filename", "source_kind", "text_field", "sources")
    raw_id_fields = ("owner",)
    inlines = [TokenizerInline]


@admin.register(Tokenizer)
class TokenizerAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "corpus", "algorithm", "vocab_size", "lowercase", "status", "created_at")
    list_filter = ("status", "algorithm", "lowercase")
    search_fields = ("name", "owner__username", "corpus__name", "id")
    readonly_fields = ("id", "progress", "progress_detail", "stats", "created_at")
    raw_id_fields = ("owner", "corpus")
