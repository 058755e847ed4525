"""What a labelled-dataset upload may be, checked by the shared upload code (webapp.jobs.uploads) with our own suffixes.

A dataset is one file, a file per split (the form's `file` is then the train file, beside the
optional `validation_file` and `test_file`), or a .zip holding the split files (the `file` field
alone): trainer.prep.labelled.archive reads it.
"""
from __future__ import annotations

from django.core.exceptions import ValidationError

from webapp.jobs.uploads import check_file

# The formats trainer.prep.labelled reads, by the extensions the upload form names. Longest first.
FORMAT_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".conll")
ACCEPTED_SUFFIXES = tuple(s + ".gz" for s in FORMAT_SUFFIXES) + FORMAT_SUFFIXES
ARCHIVE_SUFFIX = ".zip"
FILE_SUFFIXES = (*ACCEPTED_SUFFIXES, ARCHIVE_SUFFIX)  # the `file` field also takes an archive of split files
ACCEPT_ATTRIBUTE = ",".join((*FORMAT_SUFFIXES, ".gz"))  # for <input type=file accept=...>: a split's file
FILE_ACCEPT_ATTRIBUTE = ACCEPT_ATTRIBUTE + "," + ARCHIVE_SUFFIX  # the first file input
FORMATS_HELP = ("A .csv or .tsv file with a header row, a .jsonl file (one JSON object per line), a CoNLL .conll file "
                "(a token and its tag per line, a blank line between sentences) or a SQuAD .json file; any of them "
                "may be gzip-compressed (.csv.gz, ...).")
FILE_HELP = (FORMATS_HELP + " Or a .zip holding a file per split, named train, validation (or dev, valid) and "
             "test with their format's extension (train.conll, dev.conll, test.conll).")
SPLIT_FILE_HELP = {
    "validation": "Optional: the validation split in its own file, in the train file's format. Without it, a share "
                  "of the train file (the mapping page's validation fraction) is set aside for validation, at random.",
    "test": "Optional: the test split in its own file, in the train file's format. A dataset given in files without "
            "one has an empty test split, and fine-tuning on it ends without a test report.",
}
WRONG_TYPE = "“%(name)s” is not a file type the dataset upload reads. " + FILE_HELP
WRONG_SPLIT_TYPE = "“%(name)s” is not a file type the dataset upload reads. " + FORMATS_HELP
EMPTY = "The file is empty (0 bytes). Choose a file that holds examples."
ARCHIVE_AND_FILES = ("A .zip archive holds every split itself; upload it alone, or upload the train, validation and "
                     "test files one per field.")


def check_dataset_upload(filename: str, size: int) -> str:
    """The stored suffix of an acceptable dataset upload (".csv", ".conll.gz", ".zip", ...); ValidationError
    with a sentence for another type, an empty file or one over settings.UPLOAD_MAX_BYTES."""
    return check_file(filename, size, suffixes=FILE_SUFFIXES, wrong_type=WRONG_TYPE, empty=EMPTY)


def check_split_upload(filename: str, size: int) -> str:
    """As check_dataset_upload, for the file of one split (validation, test): no archive."""
    return check_file(filename, size, suffixes=ACCEPTED_SUFFIXES, wrong_type=WRONG_SPLIT_TYPE, empty=EMPTY)


def check_split_uploads(filename: str, others: dict) -> None:
    """ValidationError when an archive comes with split files of its own (`others`: {split: file or None})."""
    if filename.strip().lower().endswith(ARCHIVE_SUFFIX) and any(others.values()):
        raise ValidationError(ARCHIVE_AND_FILES, code="archive")
