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


# ---------------------------------------------------------------------------- issue 45, points 1 and 2
# A 5-class run at 5e-5 whose training loss stayed at chance (ln 5 = 1.609), as its metrics recorded
# it every 10 steps: 1.6109 at step 1, 1.6132 at step 155. Ten times the rate then learnt the task.
STEPS = [1, *range(10, 151, 10), 155]
AT_CHANCE = [1.6109, 1.6254, 1.5987, 1.6178, 1.6043, 1.6201, 1.6012, 1.6139, 1.6068, 1.6227, 1.5995, 1.6150,
             1.6081, 1.6166, 1.6029, 1.6110, 1.6132]
FLAT_UP = list(zip(STEPS, AT_CHANCE))                   # 1.6109 -> 1.6132
FLAT_DOWN = list(zip(STEPS, reversed(AT_CHANCE)))       # 1.6132 -> 1.6109: the same curve the other way round
VALID_AT_CHANCE = [(50, 1.6101), (100, 1.6098), (150, 1.6104), (155, 1.6102)]


def test_a_loss_flat_at_chance_learnt_nothing_whichever_way_its_noise_tipped():
    for train in (FLAT_UP, FLAT_DOWN, [FLAT_UP[0], FLAT_UP[-1]], [FLAT_DOWN[0], FLAT_DOWN[-1]]):
        for imported in (False, True):
            causes = below_baseline_causes(Record(lr=5e-5, steps=155, valid_losses=VALID_AT_CHANCE,
                                                  train_losses=train, classes=5, base_imported=imported))
            assert [c.key for c in causes] == ["chance"], (train, imported, causes)
            [c] = causes
            assert "learnt nothing" in c.cause and "ln 5 = 1.609" in c.evidence and "stayed flat" in c.evidence
            low, high = suggested_range(c.action.split(";")[0] + ".")
            assert 5e-5 < low < 5e-4 <= high  # the rate that then learnt it is in the range
            assert "train longer" in c.action and "too high" not in c.cause


def test_a_flat_loss_of_a_task_without_a_chance_level_reads_the_same_either_way():
    up = keys(Record(lr=5e-5, steps=155, valid_losses=VALID_AT_CHANCE, train_losses=FLAT_UP))
    down = keys(Record(lr=5e-5, steps=155, valid_losses=VALID_AT_CHANCE, train_losses=FLAT_DOWN))
    assert up == down == ["lr_low"]


def test_a_loss_that_rose_to_chance_beyond_its_noise_still_blames_a_high_rate():
    rose = [(s, 0.6 + 0.0065 * s + (0.01 if i % 2 else -0.01)) for i, s in enumerate(STEPS)]
    assert keys(Record(lr=5e-4, steps=155, valid_losses=VALID_AT_CHANCE, train_losses=rose, classes=5)) == ["lr_high"]


def test_a_loss_that_fell_well_below_chance_is_not_at_chance():
    fell = [(s, 1.61 - 0.006 * s) for s in STEPS]
    assert keys(Record(lr=5e-4, steps=155, valid_losses=SETTLED, train_losses=fell, classes=5)) == ["unclear"]


# The validations of a run still learning, the last one the end-of-run validation 5 steps after the
# one before (0.7% lower than it: under STILL_FALLING if only the last two were compared).
STILL_FALLING_END = [(50, 1.679), (100, 1.332), (150, 1.087), (155, 1.079)]
TRAIN_FALLING = [(1, 1.62), (50, 1.55), (100, 1.31), (150, 1.06), (155, 1.05)]
NOTES = ("It was pre-trained for only 79 steps; encoders that help fine-tuning are pre-trained for tens of "
         "thousands of steps or more.",)


def test_a_validation_loss_still_falling_is_told_to_train_longer_despite_a_close_end_validation():
    causes = below_baseline_causes(Record(lr=5e-5, steps=155, valid_losses=STILL_FALLING_END,
                                          train_losses=TRAIN_FALLING, classes=5, base_notes=NOTES))
    assert [c.key for c in causes] == ["still_learning", "base"]
    assert "fell from 1.6790 (step 50) to 1.0790 (step 155)" in causes[0].evidence
    assert "still falling at the end: from 1.3320 at step 100, about 21% every 50 steps" in causes[0].evidence
    assert causes[0].action == "Train longer first: it ran 155 steps; try about 465."
    assert keys(Record(lr=5e-5, steps=155, valid_losses=STILL_FALLING_END, train_losses=TRAIN_FALLING,
                       base_notes=NOTES, base_imported=True)) == ["still_learning"]


def test_a_settled_validation_loss_with_a_close_end_validation_is_not_still_learning():
    settled = [(50, 1.2), (100, 0.85), (150, 0.848), (155, 0.849)]
    assert keys(Record(lr=5e-5, steps=155, valid_losses=settled, train_losses=TRAIN_FELL)) == ["unclear"]
    noisy_end = [(50, 1.679), (100, 1.332), (150, 1.087), (155, 1.090)]  # 0.3% above its best: noise
    assert keys(Record(lr=5e-5, steps=155, valid_losses=noisy_end, train_losses=TRAIN_FALLING)) == ["still_learning"]


def test_the_chance_level_is_known_where_the_loss_is_a_cross_entropy_over_the_classes():
    from trainer.finetune.advice import chance_classes

    assert chance_classes("classification", "bert", ["a", "b", "c", "d", "e"]) == 5
    assert chance_classes("classification", "t5", ["a", "b"]) is None  # the label written as text
    assert chance_classes("classification", "gpt", ["a", "b"]) is None  # plus GPT-1's language-model loss
    assert chance_classes("regression", "bert", []) is None and chance_classes("classification", "bert", ["a"]) is None
