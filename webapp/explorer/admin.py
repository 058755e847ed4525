from django.contrib import admin

from webapp.explorer.models import ModelImport, NeighbourIndex


@admin.register(ModelImport)
class ModelImportAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "status", "size_bytes", "created_at", "finished_at")
    list_filter = ("status",)
    search_fields = ("name", "owner__username", "id")
    raw_id_fields = ("owner", "checkpoint")
    readonly_fields = ("id", "info", "created_at", "finished_at")


@admin.register(NeighbourIndex)
class NeighbourIndexAdmin(admin.ModelAdmin):
    list_display = ("dataset", "checkpoint", "pooling", "owner", "status", "progress", "count", "created_at")
    list_filter = ("status", "pooling")
    search_fields = ("owner__username", "id")
    raw_id_fields = ("owner", "checkpoint", "dataset")
    readonly_fields = ("id", "created_at", "finished_at")
