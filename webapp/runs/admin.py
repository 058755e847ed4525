from django.contrib import admin

from webapp.runs.models import Checkpoint, LogLine, MetricPoint, Run


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    extra = 0
    fields = ("step", "path", "metrics", "created_at")
    readonly_fields = fields
    can_delete = False
    show_change_link = True


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "status", "preset", "current_step", "max_steps", "queue", "claimed_by",
                    "created_at")
    list_filter = ("status", "queue", "family", "preset")
    search_fields = ("name", "owner__username", "id")
    raw_id_fields = ("owner", "corpus", "tokenizer", "cloned_from")
    readonly_fields = ("id", "claimed_by", "heartbeat_at", "started_at", "finished_at", "created_at", "tokens_seen")
    inlines = [CheckpointInline]


@admin.register(MetricPoint)
class MetricPointAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "split", "values", "created_at")
    list_filter = ("split",)
    search_fields = ("run__name", "run__id")
    raw_id_fields = ("run",)
    list_select_related = ("run",)


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "path", "created_at")
    search_fields = ("run__name", "run__id", "path")
    raw_id_fields = ("run",)
    list_select_related = ("run",)


@admin.register(LogLine)
class LogLineAdmin(admin.ModelAdmin):
    list_display = ("run", "created_at", "text")
    search_fields = ("run__name", "text")
    raw_id_fields = ("run",)
    list_select_related = ("run",)
