from django.urls import path

from webapp.runs import api

urlpatterns = [
    path("runs/", api.RunListCreateView.as_view(), name="api-runs"),
    path("runs/compare/", api.RunCompareView.as_view(), name="api-runs-compare"),
    path("runs/<uuid:run_id>/", api.RunDetailView.as_view(), name="api-run"),
    path("runs/<uuid:run_id>/metrics/", api.RunMetricsView.as_view(), name="api-run-metrics"),
    path("runs/<uuid:run_id>/log/", api.RunLogView.as_view(), name="api-run-log"),
    path("runs/<uuid:run_id>/checkpoints/", api.RunCheckpointsView.as_view(), name="api-run-checkpoints"),
    path("runs/<uuid:run_id>/cancel/", api.RunCancelView.as_view(), name="api-run-cancel"),
    path("runs/<uuid:run_id>/resume/", api.RunResumeView.as_view(), name="api-run-resume"),
    path("runs/<uuid:run_id>/clone/", api.RunCloneView.as_view(), name="api-run-clone"),
    path("runs/<uuid:run_id>/finetune-on/", api.RunFinetuneOnView.as_view(), name="api-run-finetune-on"),
    path("runs/<uuid:run_id>/config.yaml", api.RunConfigYamlView.as_view(), name="api-run-config-yaml"),
    path("runs/<uuid:run_id>/predictions.<str:fmt>", api.RunPredictionsView.as_view(), name="api-run-predictions"),
    path("runs/<uuid:run_id>/samples/", api.RunSamplesView.as_view(), name="api-run-samples"),
    path("runs/<uuid:run_id>/test-report/", api.RunTestReportView.as_view(), name="api-run-test-report"),
    path("checkpoints/<uuid:checkpoint_id>/readiness/", api.CheckpointReadinessView.as_view(),
         name="api-checkpoint-readiness"),
    path("checkpoints/<uuid:checkpoint_id>/export/", api.CheckpointExportJobView.as_view(),
         name="api-checkpoint-export-job"),
    path("checkpoints/<uuid:checkpoint_id>/export-hf.zip", api.CheckpointExportView.as_view(),
         name="api-checkpoint-export"),
    path("finetune/", api.FinetuneCreateView.as_view(), name="api-finetune"),
    path("registry/", api.RegistryView.as_view(), name="api-registry"),
]
