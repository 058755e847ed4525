from django.urls import path

from webapp.corpora import api

urlpatterns = [
    path("corpora/", api.CorpusListApi.as_view(), name="api-corpus-list"),
    path("corpora/import/", api.CorpusImportApi.as_view(), name="api-corpus-import"),
    path("corpora/<uuid:pk>/", api.CorpusDetailApi.as_view(), name="api-corpus-detail"),
    path("tokenizers/", api.TokenizerListApi.as_view(), name="api-tokenizer-list"),
    path("tokenizers/<uuid:pk>/", api.TokenizerDetailApi.as_view(), name="api-tokenizer-detail"),
    path("tokenizers/<uuid:pk>/tokenize/", api.TokenizeApi.as_view(), name="api-tokenizer-tokenize"),
]
