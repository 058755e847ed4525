from django.contrib import admin

from webapp.datasets.models import Dataset


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "status", "task", "format", "size_bytes", "original_filename", "created_at")
    list_filter = ("status", "task", "format", "created_at")
    search_fields = ("name", "original_filename", "owner__username", "id")
    readonly_fields = ("id", "size_bytes", "progress", "format", "preview", "mapping", "split_spec", "sizes", "labels",
                       "label_counts", "label_stats", "warnings", "examples", "created_at", "original_filename", "files",
                       "demo")
    raw_id_fields = ("owner",)
