from django.urls import path

from webapp.runs import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("finetune/", views.finetune_new, name="finetune"),
    path("finetune/readiness/", views.finetune_readiness, name="finetune-readiness"),
    path("compare/", views.run_compare, name="compare"),
    path("static/plotly.min.js", views.plotly_js, name="plotly-js"),
    path("checkpoints/<uuid:checkpoint_id>/export/", views.checkpoint_export, name="checkpoint-export"),
    path("checkpoints/<uuid:checkpoint_id>/pin/", views.checkpoint_pin, name="checkpoint-pin"),
    path("checkpoints/<uuid:checkpoint_id>/export-hf.zip", views.checkpoint_export_download,
         name="checkpoint-export-download"),
    path("<uuid:run_id>/", views.run_detail, name="detail"),
    path("<uuid:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<uuid:run_id>/resume/", views.run_resume, name="resume"),
    path("<uuid:run_id>/clone/", views.run_clone, name="clone"),
    path("<uuid:run_id>/finetune-on/", views.run_finetune_on, name="finetune-on"),
    path("<uuid:run_id>/config.yaml", views.run_config_yaml, name="config-yaml"),
    path("<uuid:run_id>/predictions.<str:fmt>", views.run_predictions, name="predictions"),
    path("<uuid:run_id>/trackers/<str:name>.zip", views.run_tracker_logs, name="tracker-logs"),
]
