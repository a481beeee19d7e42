"""Reading `%files=` confined to the server's root directory (real files, no server)."""

import base64
import os
from pathlib import Path

import pytest

from distrun.core.errors import LimitExceeded, SpecError
from distrun.server.cellfiles import read_cell_files


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "nb" / "data").mkdir(parents=True)
    (tmp_path / "root" / "nb" / "helper.py").write_text("X = 1\n")
    (tmp_path / "root" / "nb" / "data" / "b.csv").write_bytes(b"\x00\xff,1\n")
    (tmp_path / "root" / "top.py").write_text("top\n")
    (tmp_path / "secret.txt").write_text("outside the root\n")
    return tmp_path / "root"


def decoded(files: dict[str, str]) -> dict[str, bytes]:
    return {name: base64.b64decode(content) for name, content in files.items()}


def test_reads_files_relative_to_cwd_as_base64(root: Path):
    files = read_cell_files(str(root), "nb", ["helper.py", "data/b.csv", "./helper.py"], 10_000)
    assert decoded(files) == {"helper.py": b"X = 1\n", "data/b.csv": b"\x00\xff,1\n"}


def test_empty_cwd_is_the_root(root: Path):
    assert decoded(read_cell_files(str(root), "", ["top.py"], 10_000)) == {"top.py": b"top\n"}


@pytest.mark.parametrize("ref", ["../secret.txt", "../../secret.txt", "/etc/passwd"])
def test_a_file_outside_the_notebook_directory_is_rejected_naming_it(root: Path, ref: str):
    with pytest.raises(SpecError, match=f"file {ref!r}") as caught:
        read_cell_files(str(root), "nb", [ref], 10_000)
    assert caught.value.field == "files"


def test_a_symlink_leaving_the_root_is_rejected(root: Path):
    os.symlink(root.parent / "secret.txt", root / "nb" / "link.txt")
    with pytest.raises(SpecError, match="'link.txt' is outside the server's root"):
        read_cell_files(str(root), "nb", ["link.txt"], 10_000)


@pytest.mark.parametrize("cwd", ["..", "/tmp", "nb/../.."])
def test_a_cwd_outside_the_root_is_rejected(root: Path, cwd: str):
    with pytest.raises(SpecError, match="outside the server's root") as caught:
        read_cell_files(str(root), cwd, ["x.py"], 10_000)
    assert caught.value.field == "cwd"


def test_a_missing_file_says_so(root: Path):
    with pytest.raises(SpecError, match="file 'nope.py' named by %files does not exist"):
        read_cell_files(str(root), "nb", ["nope.py"], 10_000)


def test_a_directory_is_not_a_file(root: Path):
    with pytest.raises(SpecError, match="'data' is not a regular file"):
        read_cell_files(str(root), "nb", ["data"], 10_000)


def test_files_over_the_payload_limit_are_refused_before_reading_them_all(root: Path):
    with pytest.raises(LimitExceeded, match="reach 11 bytes at 'data/b.csv'"):
        read_cell_files(str(root), "nb", ["helper.py", "data/b.csv"], 9)


@pytest.mark.parametrize("ref", [".env", ".secrets/key", "data/.hidden.csv", "link-to-env"])
def test_hidden_files_are_refused_as_jupyter_refuses_them(root: Path, ref: str):
    (root / "nb" / ".env").write_text("TOKEN=x\n")
    (root / "nb" / ".secrets").mkdir()
    (root / "nb" / ".secrets" / "key").write_text("key\n")
    (root / "nb" / "data" / ".hidden.csv").write_text("h\n")
    (root / "nb" / "link-to-env").symlink_to(root / "nb" / ".env")
    with pytest.raises(SpecError, match="is hidden") as caught:
        read_cell_files(str(root), "nb", [ref], 10_000)
    assert caught.value.field == "files"
    allowed = read_cell_files(str(root), "nb", [ref], 10_000, allow_hidden=True)
    assert list(allowed) == [ref]


def test_a_notebook_in_a_hidden_directory_may_not_ship_its_files(root: Path):
    (root / ".private").mkdir()
    (root / ".private" / "a.py").write_text("a\n")
    with pytest.raises(SpecError, match="is hidden"):
        read_cell_files(str(root), ".private", ["a.py"], 10_000)
