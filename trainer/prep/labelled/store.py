"""ingest: check a labelled upload row by row and store it as normalised JSONL splits.

``ingest`` writes, in ``out_dir``::

    train.jsonl, validation.jsonl, test.jsonl   one normalised example per line (see examples.py);
                                                all three always exist, possibly empty
    dataset.json                                the task, mapping, split, label set, counts, sizes
                                                and source (DatasetResult plus how it was made)

in two streaming passes: read and check every row, writing the examples to a temporary
``all.jsonl`` with one split code per example (a bytearray: one byte per example); then
copy each example to its split's file while counting labels. Everything happens in a
temporary folder next to ``out_dir`` that is renamed into place at the end (into an existing
``out_dir`` file by file, ``dataset.json`` last); on any error it is removed, so a failed
ingest leaves ``out_dir`` as it was. :func:`read_meta` and :func:`iter_examples` read a stored
dataset back.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer.errors import DatasetError
from trainer.prep.labelled.examples import SPLIT_NAMES, SPLITS, ExampleBuilder
from trainer.prep.labelled.readers import DatasetReader, detect_format
from trainer.prep.labelled.tasks import TaskSpec, check_mapping
from trainer.progress import PercentProgress

META_FILE = "dataset.json"
SPLIT_FILES = {split: f"{split}.jsonl" for split in SPLITS}
META_VERSION = 1
STRATEGIES = ("random", "column", "files")
PREVIEW_EXAMPLES = 5
_UNASSIGNED = 255
_CODE = {split: i for i, split in enumerate(SPLITS)}


@dataclass(frozen=True)
class SplitSpec:
    """How the examples are divided into train, validation and test.

    ``random``: a seeded shuffle by the fractions (exact counts: round(n * fraction), at least
    one example for a fraction above 0 while train keeps one); ``column``: the column mapped to
    the role ``split`` (train; validation, valid or dev; test); ``files``: one file per split, and
    without a validation file the ``validation`` fraction of the train file is carved out at
    random for it (seeded, as a random split; 0: no validation split). A missing test file leaves
    the test split empty: a fine-tuning run then ends without a test report.
    """

    strategy: str = "random"
    train: float = 0.8
    validation: float = 0.1
    test: float = 0.1

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise DatasetError(f'"{self.strategy}" is not a way to split; choose one of {", ".join(STRATEGIES)}.')
        fractions = (self.train, self.validation, self.test)
        if any(not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f <= 1 for f in fractions):
            raise DatasetError("The split fractions must be numbers from 0 to 1.")
        if self.strategy == "random" and (self.train <= 0 or abs(sum(fractions) - 1) > 1e-6):
            raise DatasetError(f"The split fractions must add up to 1 with some left for training; "
                               f"{self.train:g} + {self.validation:g} + {self.test:g} = {sum(fractions):g}.")

    @classmethod
    def from_dict(cls, data: Mapping | None) -> SplitSpec:
        """From JSON or form data: {"strategy", "train", "validation", "test"}; numbers may be strings."""
        data = dict(data or {})
        values = {}
        for key in ("train", "validation", "test"):
            if key in data and data[key] not in (None, ""):
                try:
                    values[key] = float(data[key])
                except (TypeError, ValueError):
                    raise DatasetError(f'The {key} fraction "{data[key]}" is not a number.') from None
        return cls(strategy=str(data.get("strategy") or "random"), **values)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DatasetResult:
    """What ``ingest`` produced; ``dataset.json`` holds it with the mapping and the source."""

    task: str
    form: list[str]  # the roles the examples carry, e.g. ["sentence1", "sentence2", "label"]
    format: str  # the upload's format: csv, tsv, jsonl, conll or squad
    sizes: dict[str, int]  # examples per split
    labels: list[str] = field(default_factory=list)  # classes, or tags; list order = label ids
    label_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # split -> label -> count (tags: tokens;
    # multiple choice: the right choice's index -> count)
    label_stats: dict[str, dict[str, float]] = field(default_factory=dict)  # regression: split -> count/min/max/...
    unanswerable: dict[str, int] = field(default_factory=dict)  # extractive QA: questions without an answer
    warnings: list[str] = field(default_factory=list)  # sentences worth showing, not errors
    preview: list[dict] = field(default_factory=list)  # the first examples of train

    def to_dict(self) -> dict:
        return asdict(self)


def ingest(
    path: Path | Mapping[str, Path],
    out_dir: Path,
    *,
    original_filename: str,
    task: str,
    mapping: Mapping[str, str],
    split_spec: SplitSpec | Mapping | None = None,
    seed: int = 0,
    labels: Sequence[str] | None = None,
    label_separator: str | None = None,
    validation_path: Path | None = None,
    test_path: Path | None = None,
    progress: Callable[[float], None] | None = None,
) -> DatasetResult:
    """Check every row of a labelled upload and write its normalised splits and dataset.json.

    ``path`` is the upload, or ``{"train": path, "validation": path, "test": path}`` (validation
    and test optional) for a dataset in separate files, which ``validation_path`` and
    ``test_path`` also give. ``original_filename`` (the name uploaded) decides the format of all
    of them. ``mapping`` is ``{column: role}``; ``labels`` the label set to enforce (its order
    becomes the label ids; otherwise labels are sorted, numerically when they are integers).
    ``split_spec`` (a SplitSpec, or its dict) defaults to the files when there are several (a
    validation split carved from the train file when there is no validation file), the split
    column when one is mapped, else a random 0.8/0.1/0.1 split, shuffled by ``seed``. ``progress`` gets a
    percentage. Raises DatasetError with one sentence, leaving ``out_dir`` as it was.
    """
    files = _files(path, validation_path, test_path)
    spec = _split_spec(split_spec, files, mapping)
    fmt = detect_format(next(iter(files.values())), original_filename)
    builder = ExampleBuilder(task, mapping, labels=labels, label_separator=label_separator)
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        report = PercentProgress(progress)
        report(0)
        codes, sources = _read_all(files, fmt, builder, spec, mapping, tmp / "all.jsonl", report)
        if spec.strategy == "random":
            _assign_random(codes, spec, seed)
        elif spec.strategy == "files" and "validation" not in files:
            _carve_validation(codes, spec.validation, seed)
        tally = _write_splits(tmp, codes, builder.spec.labels, report)
        (tmp / "all.jsonl").unlink()
        result = _result(builder, fmt, tally, labels, spec, set(files))
        meta = {
            "meta_version": META_VERSION,
            **result.to_dict(),
            "mapping": dict(mapping),
            "split": spec.to_dict(),
            "seed": seed,
            "label_separator": label_separator,
            "source": {"original_filename": original_filename, "format": fmt, "files": sources},
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        _install(tmp, out_dir)
        report(100)
        return result
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _files(path, validation_path, test_path) -> dict[str, Path]:
    """{"all": path} for one file, else {split: path} with train first."""
    if isinstance(path, Mapping):
        files = {SPLIT_NAMES.get(str(k).lower(), str(k)): v for k, v in path.items() if v is not None}
        unknown = set(files) - set(SPLITS)
        if unknown:
            raise DatasetError(f'"{sorted(unknown)[0]}" is not a split; the files are for train, validation and test.')
    else:
        files = {"train": path}
    if validation_path is not None:
        files["validation"] = validation_path
    if test_path is not None:
        files["test"] = test_path
    if "train" not in files:
        raise DatasetError("A dataset in separate files needs a train file.")
    if len(files) == 1:
        return {"all": Path(files["train"])}
    return {split: Path(files[split]) for split in SPLITS if split in files}


def _split_spec(spec: SplitSpec | Mapping | None, files: dict[str, Path], mapping: Mapping[str, str]) -> SplitSpec:
    if isinstance(spec, Mapping):
        spec = SplitSpec.from_dict(spec)
    several = "all" not in files
    has_column = "split" in mapping.values()
    if spec is None:
        return SplitSpec("files" if several else "column" if has_column else "random")
    if spec.strategy == "files" and not several:
        raise DatasetError("Splitting by files needs a validation or test file besides the training file.")
    if spec.strategy != "files" and several:
        raise DatasetError(f"The dataset comes in {len(files)} files, one per split, so it is split by its files, "
                           f"not {'at random' if spec.strategy == 'random' else 'by a column'}.")
    if spec.strategy == "column" and not has_column:
        raise DatasetError("Splitting by a column needs a column mapped to the role split.")
    return spec


def _read_all(files, fmt, builder, spec, mapping, all_path, report) -> tuple[bytearray, dict]:
    """Pass 1: every row of every file, checked and normalised, to all_path; one split code each."""
    sizes = {name: max(path.stat().st_size, 1) if path.exists() else 1 for name, path in files.items()}
    total, done = sum(sizes.values()), 0
    codes = bytearray()
    sources = {}
    with open(all_path, "w", encoding="utf-8", newline="\n") as fh:
        for name, path in files.items():
            base = done

            def on_progress(fraction, base=base, size=sizes[name]):
                report(90 * (base + size * fraction) / total)

            reader = DatasetReader(path, fmt, file_label="" if name == "all" else name, on_progress=on_progress)
            checked = False
            for row in reader:
                if not checked and reader.columns is not None:
                    header = reader.details.get("header_line")
                    check_mapping(builder.spec.name, mapping, reader.columns,  # names a missing column once
                                  where=f"the header (line {header}){reader.suffix}" if header else "the file")
                    checked = True
                example, split = builder(row)
                fh.write(json.dumps(example, ensure_ascii=False) + "\n")
                if spec.strategy == "files":
                    codes.append(_CODE[name])
                elif spec.strategy == "column":
                    codes.append(_CODE[split])
                else:
                    codes.append(_UNASSIGNED)
            done += sizes[name]
            sources[name] = {"rows": reader.rows, "bytes": reader.upload.file_bytes, **reader.details}
    return codes, sources


def _assign_random(codes: bytearray, spec: SplitSpec, seed: int) -> None:
    n = len(codes)
    n_val, n_test = round(n * spec.validation), round(n * spec.test)
    n_val = max(n_val, 1) if spec.validation > 0 else 0
    n_test = max(n_test, 1) if spec.test > 0 else 0
    while n_val + n_test > n - 1 and n_val + n_test > 0:  # train keeps at least one
        if n_test >= n_val:
            n_test -= 1
        else:
            n_val -= 1
    chosen = random.Random(seed).sample(range(n), n_val + n_test)
    codes[:] = bytes([_CODE["train"]]) * n
    for i in chosen[:n_val]:
        codes[i] = _CODE["validation"]
    for i in chosen[n_val:]:
        codes[i] = _CODE["test"]


def _carve_validation(codes: bytearray, fraction: float, seed: int) -> None:
    """Files without a validation file: a seeded random ``fraction`` of the train file's examples
    becomes the validation split (at least one for a fraction above 0; train keeps one)."""
    train = [i for i, code in enumerate(codes) if code == _CODE["train"]]
    n_val = min(max(round(len(train) * fraction), 1), len(train) - 1) if fraction > 0 else 0
    for i in random.Random(seed).sample(train, max(n_val, 0)):
        codes[i] = _CODE["validation"]


def origins(split: Mapping | None, filenames: Mapping[str, str]) -> dict[str, str]:
    """Where each split's examples come from, in words: ``{"train": "from train.conll", "validation":
    "0.1 of train.conll, at random", "test": "no test file"}``.

    ``split`` is the SplitSpec's dict; ``filenames`` names the files: ``{"all": name}`` for one
    file, else ``{split: name}``. What the CLI prints and the dataset page and API show."""
    spec = SplitSpec.from_dict(split)
    if spec.strategy != "files":
        name = filenames.get("all") or filenames.get("train") or "the file"
        if spec.strategy == "column":
            return {s: f"{name}, by its split column" for s in SPLITS}
        share = {"train": spec.train, "validation": spec.validation, "test": spec.test}
        return {s: f"{share[s]:g} of {name}, at random" for s in SPLITS}
    out = {}
    for s in SPLITS:
        if s in filenames:
            out[s] = f"from {filenames[s]}"
        elif s == "validation" and spec.validation > 0:
            out[s] = f"{spec.validation:g} of {filenames.get('train', 'the train file')}, at random"
        else:
            out[s] = f"no {s} file"
    return out


class _Tally:
    """Counts per split while the examples are copied to their files."""

    def __init__(self, kind: str):
        self.kind = kind  # TaskSpec.labels
        self.sizes = {split: 0 for split in SPLITS}
        self.counts = {split: Counter() for split in SPLITS}
        self.numbers = {split: [] for split in SPLITS}  # regression: count, sum, sum of squares, min, max
        self.unanswerable = {split: 0 for split in SPLITS}
        self.preview: list[dict] = []

    def add(self, split: str, example: dict) -> None:
        self.sizes[split] += 1
        if self.kind == "classes":
            self.counts[split][example["label"]] += 1
        elif self.kind == "multi":
            self.counts[split].update(example["label"])
        elif self.kind == "tags":
            self.counts[split].update(example["tags"])
        elif self.kind == "choice":
            self.counts[split][str(example["label"])] += 1
        elif self.kind == "number":
            x = example["label"]
            s = self.numbers[split] or [0, 0.0, 0.0, x, x]
            self.numbers[split] = [s[0] + 1, s[1] + x, s[2] + x * x, min(s[3], x), max(s[4], x)]
        if "answers" in example and not example["answers"]:
            self.unanswerable[split] += 1
        if split == "train" and len(self.preview) < PREVIEW_EXAMPLES:
            self.preview.append(example)


def _write_splits(tmp: Path, codes: bytearray, kind: str, report) -> _Tally:
    """Pass 2: copy each example of all.jsonl to its split's file, counting as it goes."""
    tally = _Tally(kind)
    handles = {split: open(tmp / SPLIT_FILES[split], "w", encoding="utf-8", newline="\n") for split in SPLITS}
    try:
        with open(tmp / "all.jsonl", encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                split = SPLITS[codes[i]]
                handles[split].write(line)
                tally.add(split, json.loads(line))
                if i % 2000 == 0:
                    report(90 + 10 * i / len(codes))
    finally:
        for handle in handles.values():
            handle.close()
    return tally


def _result(builder: ExampleBuilder, fmt: str, tally: _Tally, given: Sequence[str] | None,
            spec: SplitSpec, files: set[str]) -> DatasetResult:
    task = builder.spec
    total = sum(tally.sizes.values())
    if tally.sizes["train"] == 0:
        raise DatasetError(f"None of the {total} examples is in the train split; the split column must mark some "
                           "rows train.")
    result = DatasetResult(task=task.name, form=list(builder.form), format=fmt, sizes=dict(tally.sizes),
                           preview=tally.preview)
    if task.labels in ("classes", "multi", "tags"):
        seen = Counter()
        for counts in tally.counts.values():
            seen.update(counts)
        _check_two_classes(task, seen, total)
        result.labels = list(builder.allowed) if given is not None else sort_labels(seen, tags=task.labels == "tags")
        result.label_counts = {split: {label: tally.counts[split][label] for label in result.labels}
                               for split in SPLITS}
        for split in ("validation", "test"):
            train = tally.counts["train"]
            unseen = [label for label in result.labels if tally.counts[split][label] and not train[label]]
            if unseen:
                result.warnings.append(f'The {split} split has label{"s" * (len(unseen) > 1)} that train never shows: '
                                       f"{', '.join(unseen[:10])}.")
    elif task.labels == "choice":  # where the right choice stands: a model can learn a position
        positions = sorted({p for counts in tally.counts.values() for p in counts}, key=int)
        result.label_counts = {split: {p: tally.counts[split][p] for p in positions} for split in SPLITS}
        if len(positions) == 1 and total > 1:
            result.warnings.append(f"The right choice is choice {positions[0]} in every one of the {total} examples, "
                                   "so a model can score well by its position alone; shuffle the choices.")
    elif task.labels == "number":
        result.label_stats = {split: _summary(tally.numbers[split]) for split in SPLITS if tally.numbers[split]}
    if "answers" in builder.form:  # questions that may have no answer (SQuAD 2.0)
        result.unanswerable = dict(tally.unanswerable)
    if tally.sizes["validation"] == 0:
        how = {"random": "the validation fraction is 0", "column": "no row is marked for it",
               "files": "no validation file, and the validation fraction is 0"}[spec.strategy]
        result.warnings.append(f"The validation split is empty ({how}), so fine-tuning cannot be evaluated as it runs.")
    if spec.strategy == "files" and "test" not in files:
        result.warnings.append("The test split is empty (no test file), so fine-tuning ends without a test report.")
    return result


def _check_two_classes(task: TaskSpec, seen: Counter, total: int) -> None:
    """A dataset with classes (or tags) needs two of them; the sentence names the task by its title."""
    if len(seen) >= 2:
        return
    what = task.title[:1].lower() + task.title[1:]
    if task.labels == "tags":
        only = f'tagged "{next(iter(seen))}"' if seen else "untagged"
        raise DatasetError(f"Every token of the {total} sentences is {only}; {what} needs at least two tags.")
    if not seen:
        raise DatasetError(f"None of the {total} examples has a label; {what} needs labels.")
    label = next(iter(seen))
    raise DatasetError(f'Every one of the {total} examples has the label "{label}" and no other; {what} needs at '
                       "least two classes.")


def sort_labels(labels, *, tags: bool = False) -> list[str]:
    """Labels in a stable order: numerically when all are integers, else alphabetically; tags
    with "O" first, then by entity type, B- before I-."""
    labels = list(labels)
    if tags:
        return sorted(labels, key=lambda t: (t != "O", t[2:] if t[1:2] == "-" else t, t))
    if all(_is_int(label) for label in labels):
        return sorted(labels, key=int)
    return sorted(labels)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _summary(s: list) -> dict[str, float]:
    n, total, squares, low, high = s
    mean = total / n
    return {"count": n, "min": low, "max": high, "mean": mean, "std": math.sqrt(max(squares / n - mean * mean, 0.0))}


def _install(tmp: Path, out_dir: Path) -> None:
    """Move the finished files into out_dir: one rename when it does not exist yet, else file by
    file with dataset.json (the mark of a complete dataset) removed first and written last."""
    if not out_dir.exists():
        os.rename(tmp, out_dir)
        return
    (out_dir / META_FILE).unlink(missing_ok=True)
    for name in SPLIT_FILES.values():
        os.replace(tmp / name, out_dir / name)
    os.replace(tmp / META_FILE, out_dir / META_FILE)
    tmp.rmdir()


# Where the web app keeps a dataset's prepared files, inside the folder it shows (var/datasets/<id>/).
APP_DATA_FOLDER = "data"


def dataset_folder(path: Path) -> Path:
    """The prepared dataset a path names: the folder itself, or the web app's dataset folder
    (var/datasets/<id>, whose prepared files are in its data/), so the command line takes the
    folder the app shows."""
    path = Path(path)
    if not (path / META_FILE).is_file() and (path / APP_DATA_FOLDER / META_FILE).is_file():
        return path / APP_DATA_FOLDER
    return path


def read_meta(out_dir: Path) -> dict:
    """dataset.json of a stored dataset; DatasetError when it is missing or damaged."""
    path = Path(out_dir) / META_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f'"{Path(out_dir).name}" holds no prepared dataset (no {META_FILE}); ingest it '
                           "first.") from None
    except (OSError, ValueError) as e:
        raise DatasetError(f'{META_FILE} in "{Path(out_dir).name}" cannot be read ({e}); ingest the dataset '
                           "again.") from None


def iter_examples(out_dir: Path, split: str) -> Iterator[dict]:
    """The normalised examples of one split, in file order."""
    if split not in SPLIT_FILES:
        raise DatasetError(f'"{split}" is not a split; the splits are {", ".join(SPLITS)}.')
    with open(Path(out_dir) / SPLIT_FILES[split], encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)
