"""`distrun.checkpoint`: atomic saves from rank 0, the newest complete one loaded, the last K
kept, the resume noted for the job's timeline."""

import json
from pathlib import Path

import pytest

from distrun import checkpoint
from distrun.core.checkpoint_env import CHECKPOINT_DIR_ENV, RESTART_ENV, RESUMED_FILE


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, str(tmp_path / "ckpt"))
    monkeypatch.setenv("RANK", "0")
    return tmp_path / "ckpt"


def test_the_first_run_finds_nothing_to_resume(folder: Path) -> None:
    assert checkpoint.load() is None
    assert checkpoint.latest_step() is None


def test_the_newest_complete_checkpoint_is_loaded_and_only_the_last_k_are_kept(
    folder: Path,
) -> None:
    for step in (4, 9, 14, 19):
        checkpoint.save({"step": step, "weights": [step] * 3}, step=step, keep=2)
    assert [p.name for p in checkpoint.complete(folder)] == [
        "step-000000000014.ckpt",
        "step-000000000019.ckpt",
    ]
    assert checkpoint.load() == {"step": 19, "weights": [19, 19, 19]}
    assert checkpoint.latest_step() == 19


def test_a_save_cut_off_midway_leaves_the_last_complete_one_newest(folder: Path) -> None:
    checkpoint.save({"step": 4}, step=4)
    (folder / ".partial-step-000000000009.ckpt.123").write_bytes(b"half a checkpo")
    assert checkpoint.load() == {"step": 4}


def test_only_rank_0_writes(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    assert checkpoint.save({"step": 1}, step=1) is None
    assert checkpoint.complete(folder) == []


def test_rank_0_notes_which_step_a_restart_resumed_from(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint.save({"step": 9}, step=9)
    monkeypatch.setenv(RESTART_ENV, "2")
    checkpoint.load()
    monkeypatch.setenv("RANK", "1")
    checkpoint.load()  # other ranks load too, but say nothing
    noted = [json.loads(line) for line in (folder / RESUMED_FILE).read_text().splitlines()]
    assert [(entry["restart"], entry["step"]) for entry in noted] == [(2, 9)]


def test_without_a_directory_it_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECKPOINT_DIR_ENV, raising=False)
    with pytest.raises(RuntimeError, match="DISTRUN_CHECKPOINT_DIR is not set"):
        checkpoint.load()


def test_bad_arguments_are_refused(folder: Path) -> None:
    with pytest.raises(ValueError, match="keep must be at least 1"):
        checkpoint.save({}, step=1, keep=0)
    with pytest.raises(ValueError, match="step must be 0 or more"):
        checkpoint.save({}, step=-1)
