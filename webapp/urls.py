from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("webapp.api.urls")),
    path("", include("webapp.accounts.urls")),
    path("corpora/", include("webapp.corpora.urls")),
    path("runs/", include("webapp.runs.urls")),
    path("explore/", include("webapp.explorer.urls")),
    path("datasets/", include("webapp.datasets.urls")),
    path("sweeps/", include("webapp.sweeps.urls")),
    path("serve/", include("webapp.serving.urls")),
]

handler400 = "webapp.api.errors.bad_request_page"
handler403 = "webapp.api.errors.forbidden_page"
handler404 = "webapp.api.errors.not_found_page"
handler500 = "webapp.api.errors.server_error_page"
