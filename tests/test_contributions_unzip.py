"""Safe unpacking of contributed zips: every refusal is clear and leaves nothing behind."""
from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest

from scoring.unzip import UnsafeArchive, UnzipLimits, safe_unpack


def make_zip(entries: list[tuple[str | zipfile.ZipInfo, bytes]], *, compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


def symlink_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def assert_refused(tmp_path: Path, data: bytes, expected: str, **limits) -> str:
    target = tmp_path / "out" / "paper"
    with pytest.raises(UnsafeArchive) as err:
        safe_unpack(io.BytesIO(data), target, limits=UnzipLimits(**limits) if limits else None)
    message = str(err.value)
    assert expected in message, message
    # nothing stored: no target, no staging folder left beside it
    assert not target.exists()
    parent = tmp_path / "out"
    assert not parent.exists() or list(parent.iterdir()) == []
    return message


def test_valid_zip_is_unpacked_with_its_single_top_folder_stripped(tmp_path):
    data = make_zip([("rope/rope.py", b"x = 1\n"), ("rope/paper2code_test.py", b"print('ok')\n"),
                     ("rope/sub/", b""), ("rope/sub/util.py", b"y = 2\n"), ("__MACOSX/rope/._rope.py", b"junk")])
    result = safe_unpack(io.BytesIO(data), tmp_path / "paper")
    assert result.files == ["paper2code_test.py", "rope.py", "sub/util.py"]
    assert result.stripped_prefix == "rope"
    assert (tmp_path / "paper" / "sub" / "util.py").read_text() == "y = 2\n"
    assert result.skipped  # the macOS resource fork was left out, and said so


def test_top_level_files_are_kept_as_they_are(tmp_path):
    result = safe_unpack(io.BytesIO(make_zip([("a.py", b"1"), ("pkg/b.py", b"2")])), tmp_path / "p")
    assert result.stripped_prefix == "" and result.files == ["a.py", "pkg/b.py"]


def test_nested_archives_are_stored_not_expanded(tmp_path):
    inner = make_zip([("evil.py", b"boom")])
    result = safe_unpack(io.BytesIO(make_zip([("a.py", b"1"), ("data/inner.zip", inner)])), tmp_path / "p")
    assert result.nested_archives == ["data/inner.zip"]
    assert (tmp_path / "p" / "data" / "inner.zip").read_bytes() == inner
    assert not (tmp_path / "p" / "data" / "evil.py").exists()


def test_path_traversal_is_refused(tmp_path):
    data = make_zip([("ok.py", b"1"), ("../../etc/evil.py", b"x")])
    assert_refused(tmp_path, data, "points outside the paper folder")
    assert not (tmp_path / "etc").exists()


def test_traversal_hidden_inside_a_path_is_refused(tmp_path):
    assert_refused(tmp_path, make_zip([("paper/sub/../../../x.py", b"x")]), "outside the paper folder")


def test_absolute_path_is_refused(tmp_path):
    assert_refused(tmp_path, make_zip([("/tmp/evil.py", b"x")]), "is an absolute path")


def test_windows_drive_and_backslash_paths_are_refused(tmp_path):
    assert_refused(tmp_path, make_zip([("C:\\Windows\\evil.py", b"x")]), "is an absolute path")
    assert_refused(tmp_path, make_zip([("a\\..\\..\\evil.py", b"x")]), "outside the paper folder")


def test_symlink_out_of_the_folder_is_refused(tmp_path):
    data = make_zip([("paper2code_test.py", b"1"), (symlink_info("secrets"), b"/etc/passwd")])
    assert_refused(tmp_path, data, "is a symbolic link")


def test_device_files_are_refused(tmp_path):
    info = zipfile.ZipInfo("dev")
    info.create_system = 3
    info.external_attr = (stat.S_IFCHR | 0o644) << 16
    assert_refused(tmp_path, make_zip([(info, b"")]), "not a regular file")


def test_zip_bomb_by_compression_ratio_is_refused(tmp_path):
    data = make_zip([("a.py", b"1"), ("zeros.bin", b"\0" * (20 * 1024 * 1024))])
    assert len(data) < 100_000  # 20 MB that pack into a few kB
    assert_refused(tmp_path, data, "a zip bomb?")


def test_too_many_files_is_refused(tmp_path):
    data = make_zip([(f"f{i}.py", b"x") for i in range(30)])
    assert_refused(tmp_path, data, "holds 30 files; at most 20", max_files=20)


def test_oversize_total_is_refused(tmp_path):
    data = make_zip([(f"f{i}.bin", bytes(range(256)) * 400) for i in range(5)], compression=zipfile.ZIP_STORED)
    assert_refused(tmp_path, data, "the archive unpacks to 512,000 bytes; at most 300,000", max_total_bytes=300_000)


def test_oversize_single_file_is_refused(tmp_path):
    data = make_zip([("big.bin", b"a" * 5000)], compression=zipfile.ZIP_STORED)
    assert_refused(tmp_path, data, "one file may have at most 1,000", max_file_bytes=1000)


def test_forged_declared_size_is_caught_while_streaming(tmp_path):
    # a member that declares 10 bytes but holds 200 000: the check on the directory passes, the stream stops it
    data = bytearray(make_zip([("a.py", b"1"), ("b.txt", b"x" * 200_000)], compression=zipfile.ZIP_STORED))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("b.txt")
    # patch the uncompressed size in the central directory entry of b.txt
    cd_sig = b"PK\x01\x02"
    pos = bytes(data).rfind(cd_sig)
    assert data[pos + 46: pos + 46 + 5] == b"b.txt"
    data[pos + 24: pos + 28] = (10).to_bytes(4, "little")
    assert info.file_size == 200_000
    message = assert_refused(tmp_path, bytes(data), "b.txt")
    assert "more bytes than the archive declares" in message or "damaged" in message


def test_not_a_zip_is_refused(tmp_path):
    assert_refused(tmp_path, b"this is a text file, not a zip\n" * 10, "not a zip archive")


def test_empty_archive_is_refused(tmp_path):
    assert_refused(tmp_path, make_zip([]), "holds no file")


def test_non_utf8_file_name_is_refused_with_its_bytes_shown(tmp_path):
    info = zipfile.ZipInfo("placeholder.py")
    data = bytearray(make_zip([("a.py", b"1"), (info, b"x")]))
    # replace the name bytes (local header and central directory) by Latin-1 bytes that are not UTF-8
    raw = "caf\xe9_xx.py".encode("latin-1")
    assert len(raw) == len(b"placeholder.py") - 4
    raw = raw + b"    "  # same length, keep offsets
    fixed = bytes(data).replace(b"placeholder.py", raw)
    message = assert_refused(tmp_path, fixed, "is not valid UTF-8")
    assert "caf\\xe9" in message


def test_utf8_names_without_the_flag_are_accepted(tmp_path):
    # Info-ZIP on Linux writes UTF-8 names without setting the UTF-8 flag
    data = bytearray(make_zip([("placeholder.py", b"x")]))
    raw = "résumé.py".encode("utf-8")
    padded = raw + b"_" * (len(b"placeholder.py") - len(raw))
    result = safe_unpack(io.BytesIO(bytes(data).replace(b"placeholder.py", padded)), tmp_path / "p")
    assert result.files == [padded.decode("utf-8")]


def test_duplicate_names_are_refused(tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate it writes
        data = make_zip([("a.py", b"1"), ("A.py", b"2")])
    assert_refused(tmp_path, data, "appears twice")


def test_file_and_folder_with_one_name_are_refused(tmp_path):
    assert_refused(tmp_path, make_zip([("x", b"1"), ("x/y.py", b"2")]), "both a file and a folder")
