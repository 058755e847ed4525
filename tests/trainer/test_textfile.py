"""trainer.prep.textfile.documents: the one reader of the prepared text, for the split stage and the encoder."""
from __future__ import annotations

from trainer.prep.textfile import documents

TEXT = "Première phrase.\nDeux.\n\nTrois.\n\n\nQuatre.\nCinq."  # a doubled blank line, no final break


def test_documents_and_bytes_read_through_each(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(TEXT.encode("utf-8"))
    got = list(documents(path))
    assert [d for d, _ in got] == [["Première phrase.", "Deux."], ["Trois."], ["Quatre.", "Cinq."]]
    ends = [n for _, n in got]
    assert ends == [len("Première phrase.\nDeux.\n\n".encode()), len("Première phrase.\nDeux.\n\nTrois.\n\n".encode()),
                    len(TEXT.encode())]


def test_a_byte_range_from_one_document_start_to_another(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(TEXT.encode("utf-8"))
    start = len("Première phrase.\nDeux.\n\n".encode())
    stop = start + len("Trois.\n\n\n")
    assert [d for d, _ in documents(path, start, stop)] == [["Trois."]]
    assert [d for d, _ in documents(path, stop)] == [["Quatre.", "Cinq."]]
    assert list(documents(path, stop, stop)) == []
