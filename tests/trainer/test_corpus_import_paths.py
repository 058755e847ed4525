"""Security checks of corpus sources: server paths (resolve_import) stay inside the allowed roots
and out of the application's storage, and uploaded archives (unpack_archive) write only plain
files inside their folder, counting the bytes they write."""

import io
import os
import stat
import tarfile
import zipfile

import pytest

from trainer.errors import CorpusError
from trainer.prep.sources import is_archive, resolve_import, unpack_archive

TEXT = b"One document here.\n\nAnother one.\n"


@pytest.fixture
def tree(tmp_path):
    """roots/a and roots/b (allowed), roots/storage (the app's own), outside/ (not allowed)."""
    for folder in ("roots/a/sub", "roots/b", "roots/c", "roots/storage/user1", "outside"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("roots/a/one.txt", "roots/a/sub/two.jsonl", "roots/b/three.txt", "roots/c/four.txt",
                 "roots/storage/user1/private.txt", "outside/secret.txt"):
        (tmp_path / name).write_bytes(TEXT if name.endswith(".txt") else b'{"text": "x"}\n')
    return tmp_path


def roots_of(tree):
    return [tree / "roots" / "a", tree / "roots" / "b", tree / "roots" / "storage"]


def refused(spec, roots, forbidden=()) -> str:
    with pytest.raises(CorpusError) as info:
        resolve_import(str(spec), roots, forbidden=forbidden)
    return str(info.value)


def test_a_folder_a_file_and_a_glob_inside_a_root(tree):
    roots = roots_of(tree)
    assert [s.name for s in resolve_import(str(tree / "roots" / "a"), roots)] == ["one.txt", "sub/two.jsonl"]
    assert [s.name for s in resolve_import(str(tree / "roots" / "b" / "three.txt"), roots)] == ["three.txt"]
    assert [s.name for s in resolve_import(str(tree / "roots" / "a" / "**" / "*.jsonl"), roots)] == ["sub/two.jsonl"]


def test_no_roots_configured(tree):
    assert "CORPUS_IMPORT_ROOTS" in refused(tree / "roots" / "a", [])


def test_dot_dot_is_refused_even_when_it_stays_inside(tree):
    assert '".."' in refused(f"{tree}/roots/a/../a/one.txt", roots_of(tree))
    assert '".."' in refused(f"{tree}/roots/a/../../outside/secret.txt", roots_of(tree))


def test_a_relative_path_is_refused(tree, monkeypatch):
    monkeypatch.chdir(tree / "roots" / "a")
    assert "relative" in refused("one.txt", roots_of(tree))


def test_an_absolute_path_outside_the_roots(tree):
    message = refused(tree / "outside" / "secret.txt", roots_of(tree))
    assert "outside the folders" in message and "CORPUS_IMPORT_ROOTS" in message
    assert "outside the folders" in refused(tree / "roots", roots_of(tree))  # the roots' parent
    assert "outside the folders" in refused(tree / "roots" / "c" / "four.txt", roots_of(tree))


def test_a_file_symlink_out_of_a_root_is_refused_naming_it(tree):
    os.symlink(tree / "outside" / "secret.txt", tree / "roots" / "a" / "link.txt")
    assert "outside the folders" in refused(tree / "roots" / "a" / "link.txt", roots_of(tree))
    message = refused(tree / "roots" / "a", roots_of(tree))  # found by the folder walk
    assert '"link.txt"' in message and "outside the folders" in message
    assert "outside the folders" in refused(tree / "roots" / "a" / "*.txt", roots_of(tree))  # and by a glob


def test_a_folder_symlink_out_of_a_root_is_refused_naming_it(tree):
    os.symlink(tree / "outside", tree / "roots" / "a" / "elsewhere")
    message = refused(tree / "roots" / "a", roots_of(tree))
    assert '"elsewhere"' in message and "outside the folders" in message
    assert "outside the folders" in refused(tree / "roots" / "a" / "elsewhere" / "secret.txt", roots_of(tree))
    assert "outside the folders" in refused(tree / "roots" / "a" / "**" / "*.txt", roots_of(tree))


def test_a_symlink_between_two_roots_is_fine(tree):
    os.symlink(tree / "roots" / "b" / "three.txt", tree / "roots" / "a" / "three.txt")
    found = resolve_import(str(tree / "roots" / "a" / "three.txt"), roots_of(tree))
    assert found[0].path == str((tree / "roots" / "b" / "three.txt").resolve())


def test_the_app_storage_is_forbidden_even_inside_a_root(tree):
    storage = tree / "roots" / "storage"
    forbidden = [storage]
    assert "own storage" in refused(storage / "user1" / "private.txt", roots_of(tree), forbidden)
    assert "own storage" in refused(storage / "user1", roots_of(tree), forbidden)
    assert "own storage" in refused(storage / "*" / "*.txt", roots_of(tree), forbidden)
    assert resolve_import(str(storage / "user1" / "private.txt"), roots_of(tree))  # not forbidden: allowed
    # a link inside an allowed root leading into the storage
    os.symlink(storage / "user1", tree / "roots" / "a" / "peek")
    assert "own storage" in refused(tree / "roots" / "a", roots_of(tree), forbidden)


def test_a_root_that_is_a_symlink_is_compared_by_real_path(tree):
    os.symlink(tree / "roots" / "a", tree / "alias")
    assert [s.name for s in resolve_import(str(tree / "alias"), [tree / "alias"])] == ["one.txt", "sub/two.jsonl"]
    assert [s.name for s in resolve_import(str(tree / "roots" / "a" / "one.txt"), [tree / "alias"])] == ["one.txt"]
    assert [s.name for s in resolve_import(str(tree / "alias" / "*.txt"), [tree / "roots" / "a"])] == ["one.txt"]
    assert "outside the folders" in refused(tree / "roots" / "b" / "three.txt", [tree / "alias"])


def test_a_glob_over_two_roots_takes_only_what_is_inside_them(tree):
    found = resolve_import(str(tree / "roots" / "*" / "*.txt"), roots_of(tree)[:2])
    assert [s.name for s in found] == ["a/one.txt", "b/three.txt"]  # not c/ nor storage/: no root there
    assert "outside the folders" in refused(tree / "outside" / "*.txt", roots_of(tree))
    assert "Nothing matches" in refused(tree / "roots" / "*" / "*.parquet", roots_of(tree))


# --- archives -----------------------------------------------------------------------------------


def make_zip(path, members):
    """members: (name, bytes) or a ZipInfo with its bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def make_tar(path, members, mode="w"):
    """members: (name, bytes) for files, or a TarInfo (links, devices) with None."""
    with tarfile.open(path, mode) as tf:
        for member, data in members:
            if isinstance(member, tarfile.TarInfo):
                tf.addfile(member, io.BytesIO(data) if data is not None else None)
            else:
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def unpack(tmp_path, archive, max_bytes=1 << 20):
    dest = tmp_path / "dest"
    dest.mkdir(exist_ok=True)
    return dest, unpack_archive(archive, dest, max_bytes=max_bytes)


def unpack_fails(tmp_path, archive, max_bytes=1 << 20) -> str:
    dest = tmp_path / "dest"
    dest.mkdir(exist_ok=True)
    with pytest.raises(CorpusError) as info:
        unpack_archive(archive, dest, max_bytes=max_bytes)
    assert list(dest.iterdir()) == []  # nothing partial left behind
    return str(info.value)


GOOD = [("shards/b.jsonl", b'{"text": "b"}\n'), ("a.txt", TEXT), ("shards/a.txt.gz", b"\x1f\x8b not really"),
        ("__MACOSX/._a.txt", b"junk"), (".DS_Store", b"junk"), ("shards/.hidden.txt", b"junk")]


@pytest.mark.parametrize("kind", ["zip", "tar", "tar.gz", "tgz"])
def test_archives_unpack_their_corpus_files_sorted_by_name(tmp_path, kind):
    path = tmp_path / f"up.{kind}"
    if kind == "zip":
        make_zip(path, GOOD)
    else:
        make_tar(path, GOOD, "w" if kind == "tar" else "w:gz")
    assert is_archive(path.name)
    dest, written = unpack(tmp_path, path)
    assert [p.relative_to(dest).as_posix() for p in written] == ["a.txt", "shards/a.txt.gz", "shards/b.jsonl"]
    assert (dest / "a.txt").read_bytes() == TEXT
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "a.txt", "shards/a.txt.gz", "shards/b.jsonl"]


def test_is_archive():
    assert [is_archive(n) for n in ("a.ZIP", "a.tar", "a.tar.gz", "a.tgz", "a.txt.gz", "a.jsonl", "a.tar.xz")] == [
        True, True, True, True, False, False, False]


@pytest.mark.parametrize("name, expected", [
    ("../evil.txt", '".."'), ("shards/../../evil.txt", '".."'), ("/etc/evil.txt", "absolute"),
    ("C:/evil.txt", "absolute"), ("notes.docx", "not a type of file"), ("inner.zip", "not a type of file"),
])
def test_zip_members_with_bad_names_are_refused(tmp_path, name, expected):
    archive = make_zip(tmp_path / "up.zip", [("good.txt", TEXT), (name, TEXT)])
    assert expected in unpack_fails(tmp_path, archive)


@pytest.mark.parametrize("name", ["../evil.txt", "/abs/evil.txt"])
def test_tar_members_with_bad_names_are_refused(tmp_path, name):
    assert "holds" in unpack_fails(tmp_path, make_tar(tmp_path / "up.tar", [("good.txt", TEXT), (name, TEXT)]))


def test_a_zip_symlink_member_is_refused(tmp_path):
    link = zipfile.ZipInfo("link.txt")
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    archive = make_zip(tmp_path / "up.zip", [("good.txt", TEXT), (link, "/etc/passwd")])
    assert "symbolic link" in unpack_fails(tmp_path, archive)


@pytest.mark.parametrize("kind, expected", [
    (tarfile.SYMTYPE, "a link"), (tarfile.LNKTYPE, "a link"), (tarfile.CHRTYPE, "device"),
    (tarfile.FIFOTYPE, "device"),
])
def test_tar_links_and_devices_are_refused(tmp_path, kind, expected):
    special = tarfile.TarInfo("special.txt")
    special.type = kind
    special.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    archive = make_tar(tmp_path / "up.tar", [("good.txt", TEXT), (special, None)])
    assert expected in unpack_fails(tmp_path, archive)


def test_a_zip_bomb_stops_at_max_bytes(tmp_path):
    archive = make_zip(tmp_path / "bomb.zip", [("a.txt", TEXT), ("zeros.txt", b"a" * (4 << 20))])
    assert archive.stat().st_size < 100_000
    message = unpack_fails(tmp_path, archive, max_bytes=1 << 20)
    assert "unpacks to more than" in message and "UPLOAD_MAX_DECOMPRESSED_BYTES" in message


def test_a_gzip_tar_bomb_stops_at_max_bytes(tmp_path):
    archive = make_tar(tmp_path / "bomb.tar.gz", [("zeros.txt", b"a" * (4 << 20))], "w:gz")
    assert "unpacks to more than" in unpack_fails(tmp_path, archive, max_bytes=1 << 20)


def test_damaged_and_empty_archives_are_sentences(tmp_path):
    data = (make_zip(tmp_path / "ok.zip", [("a.txt", TEXT * 1000)])).read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    assert "archive" in unpack_fails(tmp_path, tmp_path / "cut.zip")
    (tmp_path / "plain.zip").write_bytes(b"just text")
    assert "not a readable .zip or .tar archive" in unpack_fails(tmp_path, tmp_path / "plain.zip")
    assert "no corpus files" in unpack_fails(tmp_path, make_zip(tmp_path / "junk.zip", [(".DS_Store", b"x")]))


def test_the_same_member_twice_is_refused(tmp_path):
    archive = make_tar(tmp_path / "twice.tar", [("a.txt", TEXT), ("./a.txt", TEXT)])
    assert "twice" in unpack_fails(tmp_path, archive)
