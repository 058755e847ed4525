from django.urls import path

from webapp.explorer import api, incontext

urlpatterns = [
    path("explore/fill-mask/", api.FillMaskView.as_view(), name="api-explore-fill-mask"),
    path("explore/generate-seq2seq/", api.GenerateSeq2SeqView.as_view(), name="api-explore-generate-seq2seq"),
    path("explore/generate/", api.GenerateView.as_view(), name="api-explore-generate"),
    path("explore/fill-spans/", api.FillSpansView.as_view(), name="api-explore-fill-spans"),
    path("explore/permutation/", api.PermutationView.as_view(), name="api-explore-permutation"),
    path("explore/attention/", api.AttentionView.as_view(), name="api-explore-attention"),
    path("explore/word-similarity/", api.WordSimilarityView.as_view(), name="api-explore-word-similarity"),
    path("explore/next-sentence/", api.NextSentenceView.as_view(), name="api-explore-next-sentence"),
    path("explore/sentence-order/", api.SentenceOrderView.as_view(), name="api-explore-sentence-order"),
    path("explore/classify/", api.ClassifyView.as_view(), name="api-explore-classify"),
    path("explore/tag/", api.TagView.as_view(), name="api-explore-tag"),
    path("explore/answer/", api.AnswerView.as_view(), name="api-explore-answer"),
    path("explore/embed/", api.EmbedView.as_view(), name="api-explore-embed"),
    path("explore/neighbours/index/", api.NeighbourIndexView.as_view(), name="api-explore-neighbour-index"),
    path("explore/neighbours/index/<uuid:pk>/", api.NeighbourIndexDetailView.as_view(),
         name="api-explore-neighbour-index-detail"),
    path("explore/neighbours/", api.NeighboursView.as_view(), name="api-explore-neighbours"),
    path("explore/compare/", api.CompareView.as_view(), name="api-explore-compare"),
    path("explore/inspect/", api.InspectView.as_view(), name="api-explore-inspect"),
    path("explore/prompt-builder/", incontext.PromptBuilderView.as_view(), name="api-explore-prompt-builder"),
    path("explore/incontext-accuracy/", incontext.IncontextAccuracyView.as_view(),
         name="api-explore-incontext-accuracy"),
    path("explore/imports/", api.ImportListView.as_view(), name="api-explore-imports"),
    path("explore/imports/<uuid:pk>/", api.ImportDetailView.as_view(), name="api-explore-import"),
]
