from django.urls import path

from webapp.corpora import views

app_name = "corpora"

urlpatterns = [
    path("", views.corpus_list, name="list"),
    path("upload/", views.corpus_upload, name="upload"),
    path("import/", views.corpus_import, name="import"),
    path("demo/", views.corpus_demo, name="demo"),
    path("<uuid:pk>/", views.corpus_detail, name="detail"),
    path("<uuid:pk>/delete/", views.corpus_delete_view, name="delete"),
    path("<uuid:pk>/tokenizers/", views.tokenizer_new, name="tokenizer-create"),
    path("tokenizers/", views.tokenizer_list, name="tokenizer-list"),
    path("tokenizers/<uuid:pk>/", views.tokenizer_detail, name="tokenizer-detail"),
    path("tokenizers/<uuid:pk>/delete/", views.tokenizer_delete_view, name="tokenizer-delete"),
]
