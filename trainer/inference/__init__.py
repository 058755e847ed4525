"""Using checkpoints: `loading` (checkpoint loading and its per-process cache), one module per
explorer capability (`masked`: fill-mask and sentence pairs; `generate`: text generation, span
filling, UniLM's seq2seq; `attention`: the attention viewer; `similarity`: ELMo's word
vectors) and `importing` (Hugging Face folders as native checkpoints). Each capability asks
the checkpoint's trainer.families Family what it can do. Importing this package imports no
torch; its capability modules do."""
