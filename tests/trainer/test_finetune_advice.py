"""The below-baseline advice follows from the run's own record (issue 31, point 1): each rule is
tested against a record that calls for it, and against one that does not."""
from __future__ import annotations

import re

from trainer.finetune.advice import Record, below_baseline_causes


def keys(record: Record) -> list[str]:
    return [c.key for c in below_baseline_causes(record)]


FALLING = [(100, 1.2), (200, 0.9), (300, 0.8)]
SETTLED = [(100, 1.2), (200, 0.80), (300, 0.799)]
TRAIN_FELL = [(10, 1.6), (300, 0.7)]


def test_the_minilm_case_is_told_to_train_longer_and_neither_its_base_nor_its_rate_is_blamed():
    """An imported MiniLM at 5e-5, its validation loss still falling at the last step."""
    causes = below_baseline_causes(Record(lr=5e-5, steps=300, valid_losses=FALLING, train_losses=TRAIN_FELL,
                                          epochs=1.2, base_imported=True))
    assert [c.key for c in causes] == ["still_learning"]
    [c] = causes
    assert "fell from 1.2000 (step 100) to 0.8000 (step 300)" in c.evidence and "still falling" in c.evidence
    assert c.action == "Train longer first: it ran 1.2 epochs (300 steps); try 3.6 epochs (about 900 steps)."
    text = " ".join(f"{x.cause} {x.evidence} {x.action}" for x in causes)
    assert "pre-training" not in text and "learning rate" not in text and "2e-5 to 5e-5" not in text


def test_steps_are_suggested_when_the_epochs_are_not_known():
    [c] = below_baseline_causes(Record(lr=5e-5, steps=300, valid_losses=FALLING, train_losses=TRAIN_FELL))
    assert c.action == "Train longer first: it ran 300 steps; try about 900."


def test_a_loss_that_rose_after_its_best_is_overfitting():
    causes = below_baseline_causes(Record(lr=5e-5, steps=300, valid_losses=[(100, 0.9), (200, 0.7), (300, 0.9)],
                                          train_losses=TRAIN_FELL))
    assert [c.key for c in causes] == ["overfit"]
    assert "lowest at step 200 (0.7000) and rose to 0.9000" in causes[0].evidence


def suggested_range(action: str) -> tuple[float, float]:
    low, high = re.search(r"([0-9.e-]+) to ([0-9.e-]+)\.$", action).groups()
    return float(low), float(high)


def test_a_rising_training_loss_blames_a_high_rate_with_a_range_below_it():
    for lr in (1e-3, 5e-5, 2e-5):
        [c] = [c for c in below_baseline_causes(Record(lr=lr, steps=300, valid_losses=SETTLED,
                                                       train_losses=[(10, 1.0), (300, 1.3)])) if c.key == "lr_high"]
        low, high = suggested_range(c.action)
        assert low < high < lr, (lr, c.action)  # never contains the rate used
        assert "rose from 1.0000 (step 10) to 1.3000" in c.evidence


def test_a_flat_training_loss_blames_a_low_rate_with_a_range_above_it():
    for lr in (1e-6, 2e-5, 5e-5):
        causes = below_baseline_causes(Record(lr=lr, steps=300, valid_losses=SETTLED,
                                              train_losses=[(10, 1.00), (300, 0.98)]))
        [c] = [c for c in causes if c.key == "lr_low"]
        low, high = suggested_range(c.action)
        assert lr < low < high, (lr, c.action)
        assert "barely moved" in c.evidence


def test_the_rate_is_not_blamed_when_the_training_loss_fell_well():
    assert keys(Record(lr=5e-5, steps=300, valid_losses=SETTLED, train_losses=TRAIN_FELL)) == ["unclear"]


def test_the_base_is_blamed_only_by_its_own_record():
    notes = ("It was pre-trained for only 79 steps; encoders that help fine-tuning are pre-trained for tens of "
             "thousands of steps or more.",)
    own = below_baseline_causes(Record(lr=1e-3, steps=300, valid_losses=SETTLED, train_losses=TRAIN_FELL,
                                       base_notes=notes))
    assert [c.key for c in own] == ["base"] and "only 79 steps" in own[0].evidence
    assert "import a pre-trained Hugging Face checkpoint" in own[0].action
    imported = below_baseline_causes(Record(lr=1e-3, steps=300, valid_losses=SETTLED, train_losses=TRAIN_FELL,
                                            base_notes=notes, base_imported=True))
    assert [c.key for c in imported] == ["unclear"] and "an imported, pre-trained model" in imported[0].evidence
    assert keys(Record(lr=1e-3, steps=300, valid_losses=SETTLED, train_losses=TRAIN_FELL)) == ["unclear"]


def test_several_causes_come_together_and_bad_points_are_ignored():
    causes = below_baseline_causes(Record(lr=1e-3, steps=300, valid_losses=[(100, 1.2), (200, float("nan")),
                                                                            (250, 1.0), (300, 0.9)],
                                          train_losses=[(10, 1.0), (300, 1.3)], base_notes=("Few steps.",)))
    assert [c.key for c in causes] == ["still_learning", "lr_high", "base"]
