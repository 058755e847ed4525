"""Labelled datasets for fine-tuning: read an upload, map its columns, check it, split it, store it.

Pure Python (csv, json, gzip); no Django, no torch. The web app and the fine-tuning trainer use
these entry points::

    sniff(path, original_filename) -> Preview              format, columns, first rows, suggested
                                                            {column: role} mapping and task
    ingest(path, out_dir, *, original_filename, task, mapping, split_spec=None, seed=0,
           labels=None, label_separator=None, validation_path=None, test_path=None,
           progress=None) -> DatasetResult                  out_dir/{train,validation,test}.jsonl
                                                            + dataset.json, atomically
    sniff_files({split: (path, name)}) -> Preview            the same for a file per split (one format)
    unpack_split_archive(zip, target=, max_bytes=) -> {split: (path, name)}   a .zip of split files
    origins(split_spec, filenames) -> {split: words}        where each split's examples come from
    label_counts(out_dir) -> dict                           per-split counts for a bar chart
    length_histogram(out_dir, tokenizer_dir, max_length) -> LengthHistogram
    read_meta(out_dir) -> dict; iter_examples(out_dir, split) -> Iterator[dict]
    dataset_folder(path) -> the prepared folder a path names (also the web app's var/datasets/<id>)
    write_demo_dataset(name, out_path) -> Path              DEMOS: one per task type

Formats (readers.FORMATS): CSV, TSV, JSONL, CoNLL, SQuAD JSON v1.1/v2.0, each optionally gzip-
compressed. Roles (tasks.ROLES) and task types (tasks.TASKS) are described in tasks.py; the
normalised example of each task in examples.py; the output folder in store.py. Every problem
with the data raises :class:`trainer.errors.DatasetError` with one sentence that names the row
or line at fault.

Modules: tasks (roles, task types, mapping suggestion and checks), readers (formats, sniff),
archive (a .zip of train / validation / test files),
examples (row -> checked example), store (ingest: splits, counts, the atomic write; reading a
stored dataset back), stats (charts), demos (datasets made from the standard library's docstrings).
"""

from trainer.prep.labelled.archive import ARCHIVE_NAMES, ARCHIVE_SUFFIX, is_archive, unpack_split_archive
from trainer.prep.labelled.demos import DEMOS, DemoDataset, write_demo_dataset
from trainer.prep.labelled.examples import SPLITS, ExampleBuilder
from trainer.prep.labelled.readers import FORMATS, DatasetReader, Preview, Row, detect_format, sniff, sniff_files
from trainer.prep.labelled.stats import LengthHistogram, label_counts, length_histogram, model_input
from trainer.prep.labelled.store import (META_FILE, SPLIT_FILES, DatasetResult, SplitSpec, dataset_folder, ingest,
                                         iter_examples, origins, read_meta)
from trainer.prep.labelled.tasks import (HEADER_ALIASES, ROLES, TASK_TYPES, TASKS, TaskSpec, check_mapping,
                                         suggest, suggest_mapping, suggest_task)

__all__ = [
    "ARCHIVE_NAMES", "ARCHIVE_SUFFIX", "DEMOS", "FORMATS", "HEADER_ALIASES", "META_FILE", "ROLES", "SPLITS",
    "SPLIT_FILES", "TASKS", "TASK_TYPES", "DatasetReader", "DatasetResult", "DemoDataset", "ExampleBuilder",
    "LengthHistogram", "Preview", "Row", "SplitSpec", "TaskSpec", "check_mapping", "dataset_folder", "detect_format",
    "ingest",
    "is_archive", "iter_examples", "label_counts", "length_histogram", "model_input", "origins", "read_meta", "sniff",
    "sniff_files", "suggest", "suggest_mapping", "suggest_task", "unpack_split_archive", "write_demo_dataset",
]
