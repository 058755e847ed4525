"""ELMo as features (Peters et al. 2018) for classification and token classification datasets on
an ELMo checkpoint: the biLM frozen, its layers mixed by a learned softmax-normalised scalar mix
with gamma, a small task model on top (models_lib.families.elmo_tasks.ElmoForTask).

The examples are tokenised as for the encoders (trainer.finetune.tasks: the checkpoint's
tokenizer; a pair is read as one sequence; the first sub-token of each word carries its tag) and
scored by the same steps and metrics; only the model differs. What trains is the mix (s, gamma)
and the task model: the biLM takes no gradient and keeps its dropout off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from trainer.errors import ConfigError
from trainer.finetune.tasks import SequenceCollator, SequenceStep, Task, TokenCollator, TokenStep

FAMILIES = ("elmo",)


@dataclass(frozen=True)
class ElmoTask(Task):
    def build_model(self, base: Any, labels: Sequence[str], config: Any = None) -> Any:
        from models_lib.families.downstream import TaskConfig
        from models_lib.families.elmo_tasks import ElmoForTask

        if config is not None and config.max_length > base.max_positions:
            raise ConfigError(f"max_length {config.max_length} is more than this ELMo model's {base.max_positions} "
                              f"positions; lower it.")
        return ElmoForTask.from_lm(base, TaskConfig(self.head, len(labels), list(labels), self.problem))


ELMO_CLASSIFICATION = ElmoTask("classification", "Sequence classification (ELMo: a frozen biLM's layers, a learned "
                               "scalar mix, a BiLSTM and a linear layer)", "sequence_classification",
                               "single_label_classification", SequenceCollator, SequenceStep, "classification",
                               smoothing=True, families=FAMILIES, explorer_action="classify", balances_classes=True)
ELMO_TOKEN_CLASSIFICATION = ElmoTask("token_classification", "Token classification (ELMo: a frozen biLM's layers, "
                                     "a learned scalar mix, a BiLSTM and a linear layer per token)",
                                     "token_classification", None, TokenCollator, TokenStep, "token_classification",
                                     smoothing=True, families=FAMILIES, explorer_action="tag", balances_classes=True)
