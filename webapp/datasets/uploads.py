"""What a labelled-dataset upload may be, checked by the corpora's upload code with our own suffixes."""
from __future__ import annotations

from webapp.corpora.uploads import check_file

# The formats trainer.prep.labelled reads, by the extensions the upload form names. Longest first.
FORMAT_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".conll")
ACCEPTED_SUFFIXES = tuple(s + ".gz" for s in FORMAT_SUFFIXES) + FORMAT_SUFFIXES
ACCEPT_ATTRIBUTE = ",".join((*FORMAT_SUFFIXES, ".gz"))  # for <input type=file accept=...>
FILE_HELP = ("A .csv or .tsv file with a header row, a .jsonl file (one JSON object per line), a CoNLL .conll file "
             "(a token and its tag per line, a blank line between sentences) or a SQuAD .json file; any of them "
             "may be gzip-compressed (.csv.gz, ...).")
WRONG_TYPE = "“%(name)s” is not a file type the dataset upload reads. " + FILE_HELP


def check_dataset_upload(filename: str, size: int) -> str:
    """The stored suffix of an acceptable dataset upload (".csv", ".conll.gz", ...); ValidationError with a
    sentence for another type, an empty file or one over settings.UPLOAD_MAX_BYTES."""
    return check_file(filename, size, suffixes=ACCEPTED_SUFFIXES, wrong_type=WRONG_TYPE,
                      empty="The file is empty (0 bytes). Choose a file that holds examples.")
