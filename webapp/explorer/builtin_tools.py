"""The explorer's own tools (registered in webapp.explorer.tools.REGISTRY): their endpoints, panels,
scripts, the form fields each reads and its answer without JavaScript."""
from __future__ import annotations

from webapp.explorer import api, incontext, pages
from webapp.explorer.forms import ExploreForm
from webapp.explorer.tools import ExplorerTool, ToolApi

DECODING = ExploreForm.DECODING_FIELDS
PAIR = (("text_a", "Type sentence A."), ("text_b", "Type sentence B."))
ICL = ("icl_dataset", "icl_template", "icl_seed", "icl_normalise")
ICL_DEFAULTS = (("icl_seed", 0), ("icl_template", incontext.DEFAULT_TEMPLATE))
ICL_INITIAL = (("icl_normalise", True),)
# What the fine-tuned panels start with: like the demo datasets' examples (stdlib docstrings).
QA_CONTEXT = ("getcwd() returns a string representing the current working directory. It raises OSError when the "
              "directory has been removed.")


def _with_prefix(data: dict, form) -> None:
    """T5's text-to-text: an input is needed, and the chosen task prefix goes before it once."""
    prompt = (data.get("prompt") or "").strip()
    prefix = data.get("task_prefix") or ""
    if not prompt:
        form.add_error("prompt", "Type an input for the model (with its task prefix, e.g. “summarize: …”).")
    elif prefix and not prompt.startswith(prefix.strip()):
        data["prompt"] = prefix + prompt


# ---------------------------------------------------------------------------- encoders (and UniLM)
FILL_MASK = ExplorerTool(
    "fill_mask", "explorer/_fill_mask.html", "js/explorer.js", ToolApi("fill-mask", "fill-mask/", api.FillMaskView),
    pages.fill_mask, fields=("text", "top_k"),
    required=(("text", "Type a sentence with [MASK] where a word should be predicted."),), defaults=(("top_k", 5),),
    compare=pages.FILL_MASK,
    initial=(("text", "The capital of France is [MASK]."),))
NEXT_SENTENCE = ExplorerTool(
    "next_sentence", "explorer/_sentence_pairs.html", "js/explorer.js",
    ToolApi("next-sentence", "next-sentence/", api.NextSentenceView), pages.next_sentence,
    fields=("text_a", "text_b"), required=PAIR, compare=pages.NEXT_SENTENCE)
SENTENCE_ORDER = ExplorerTool(
    "sentence_order", "explorer/_sentence_pairs.html", "js/explorer.js",
    ToolApi("sentence-order", "sentence-order/", api.SentenceOrderView), pages.sentence_order,
    fields=("text_a", "text_b"), required=PAIR, compare=pages.SENTENCE_ORDER)
GENERATE_SEQ2SEQ = ExplorerTool(
    "generate_seq2seq", "explorer/_seq2seq.html", "js/explorer_generate.js",
    ToolApi("generate-seq2seq", "generate-seq2seq/", api.GenerateSeq2SeqView), pages.generate_seq2seq,
    fields=("source", *DECODING),
    required=(("source", "Type a source (e.g. a title) for the model to write a target for."),))

# ---------------------------------------------------------------------------- fine-tuned checkpoints, any encoder
CLASSIFY = ExplorerTool(
    "classify", "explorer/_downstream.html", "js/explorer_downstream.js",
    ToolApi("classify", "classify/", api.ClassifyView), pages.classify, fields=("classify_text", "classify_text_b"),
    required=(("classify_text", "Type a text to classify."),), compare=pages.CLASSIFY,
    initial=(("classify_text", "Return a new dictionary initialized from an optional positional argument."),))
CHOOSE = ExplorerTool(
    "choose", "explorer/_downstream.html", "js/explorer_downstream.js", ToolApi("choose", "choose/", api.ChooseView),
    pages.choose, fields=("choose_context", "choose_choices"),
    required=(("choose_context", "Type a context (or question) to choose an answer for."),
              ("choose_choices", "Type two to eight choices, one per line.")),
    initial=(("choose_context", "Return the current working directory as a string."),
             ("choose_choices", "getcwd\nchdir\nlistdir\nmkdir")))
TAG = ExplorerTool(
    "tag", "explorer/_downstream.html", "js/explorer_downstream.js", ToolApi("tag", "tag/", api.TagView), pages.tag,
    fields=("tag_text",), required=(("tag_text", "Type a sentence to tag."),),
    initial=(("tag_text", "Use os.path.join to build the path, and catch FileNotFoundError when it is missing."),))
ANSWER = ExplorerTool(
    "answer", "explorer/_downstream.html", "js/explorer_downstream.js", ToolApi("answer", "answer/", api.AnswerView),
    pages.answer, fields=("qa_question", "qa_context", "qa_n_best"),
    required=(("qa_question", "Type a question."), ("qa_context", "Paste a context that may hold the answer.")),
    defaults=(("qa_n_best", 5),),
    initial=(("qa_question", "What does getcwd return?"), ("qa_context", QA_CONTEXT)))
EMBED = ExplorerTool(
    "embed", "explorer/_downstream.html", "js/explorer_downstream.js", ToolApi("embed", "embed/", api.EmbedView),
    pages.embed, fields=("embed_sentences", "embed_pooling"),
    required=(("embed_sentences", "Type two to eight sentences, one per line."),), defaults=(("embed_pooling", "mean"),),
    initial=(("embed_sentences", "Return the absolute path of a file.\nGive back the full path of the file.\n"
                                 "Open a network socket to the server."),))
NEIGHBOURS_INDEX = ExplorerTool(
    "neighbours_index", "explorer/_downstream.html", "js/explorer_downstream.js",
    ToolApi("neighbour-index", "neighbours/index/", api.NeighbourIndexView), pages.neighbours_index,
    fields=("nn_dataset", "nn_pooling"), required=(("nn_dataset", "Choose one of your datasets."),),
    defaults=(("nn_pooling", "mean"),))
NEIGHBOURS = ExplorerTool(
    "neighbours", "explorer/_downstream.html", "js/explorer_downstream.js",
    ToolApi("neighbours", "neighbours/", api.NeighboursView), pages.neighbours_search,
    fields=("nn_dataset", "nn_pooling", "nn_text", "nn_k"),
    required=(("nn_dataset", "Choose one of your datasets."),
              ("nn_text", "Type a sentence to find its nearest neighbours.")),
    defaults=(("nn_pooling", "mean"), ("nn_k", 5)),
    initial=(("nn_text", "Return the absolute path of a file."),))

# ---------------------------------------------------------------------------- XLNet (with JavaScript only)
PERMUTATION = ExplorerTool(
    "permutation", "explorer/_permutation.html", "js/explorer_permutation.js",
    ToolApi("permutation", "permutation/", api.PermutationView))

# ---------------------------------------------------------------------------- T5, GPT, ELMo
TEXT_TO_TEXT = ExplorerTool(  # asks the generate endpoint with JavaScript
    "text_to_text", "explorer/_generation.html", "js/explorer_generate.js", None, pages.text_to_text,
    fields=("task_prefix", "prompt", *DECODING), clean=_with_prefix)
FILL_SPANS = ExplorerTool(
    "fill_spans", "explorer/_generation.html", "js/explorer_generate.js",
    ToolApi("fill-spans", "fill-spans/", api.FillSpansView), pages.fill_spans, fields=("span_text", *DECODING),
    required=(("span_text", "Type a text with <extra_id_0> where a span is missing."),),
    initial=(("span_text", "The cat <extra_id_0> on the mat, and the dog <extra_id_1> to the park."),))
GENERATE = ExplorerTool(
    "generate", "explorer/_generation.html", "js/explorer_generate.js",
    ToolApi("generate", "generate/", api.GenerateView), pages.generate, fields=("gen_prompt", "gen_chat", *DECODING),
    required=(("gen_prompt", "Type a prompt for the model to continue."),))
WORD_SIMILARITY = ExplorerTool(
    "word_similarity", "explorer/_generation.html", "js/explorer_generate.js",
    ToolApi("word-similarity", "word-similarity/", api.WordSimilarityView), pages.word_similarity,
    fields=("sentence_a", "sentence_b", "word"),
    required=(("sentence_a", "Type sentence A."), ("sentence_b", "Type sentence B."),
              ("word", "Type the word to compare.")),
    initial=(("sentence_a", "我今天吃了一个苹果"), ("sentence_b", "我买了一部苹果手机"), ("word", "苹果")))
PROMPT_BUILDER = ExplorerTool(
    "prompt_builder", "explorer/_prompt_builder.html", "js/explorer_incontext.js",
    ToolApi("prompt-builder", "prompt-builder/", incontext.PromptBuilderView), pages.prompt_builder,
    fields=(*ICL, "icl_k", "icl_index"), required=(("icl_dataset", "Choose one of your classification datasets."),),
    defaults=(*ICL_DEFAULTS, ("icl_k", 2), ("icl_index", 0)), initial=ICL_INITIAL)
INCONTEXT_ACCURACY = ExplorerTool(
    "incontext_accuracy", "explorer/_prompt_builder.html", "js/explorer_incontext.js",
    ToolApi("incontext-accuracy", "incontext-accuracy/", incontext.IncontextAccuracyView), pages.incontext_accuracy,
    fields=(*ICL, "icl_kmax", "icl_queries"),
    required=(("icl_dataset", "Choose one of your classification datasets."),),
    defaults=(*ICL_DEFAULTS, ("icl_kmax", 4), ("icl_queries", 20)), initial=ICL_INITIAL)

# ---------------------------------------------------------------------------- every family but ELMo (JavaScript)
ATTENTION = ExplorerTool(
    "attention", "explorer/_attention.html", "js/explorer_attention.js",
    ToolApi("attention", "attention/", api.AttentionView))
