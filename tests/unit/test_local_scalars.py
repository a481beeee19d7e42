"""The local engine's reading of TensorBoard event files (engines/local/scalars.py), with
TensorBoard's own writer; appended events are read by the next call."""

from pathlib import Path

import pytest

from distrun.engines.local.scalars import read_scalars

summary = pytest.importorskip("tensorboard.summary", reason="the tensorboard package")


def write(directory: Path, tag: str, points: list[tuple[int, float]]) -> None:
    writer = summary.Writer(str(directory))
    for step, value in points:
        writer.add_scalar(tag, value, step=step)
    writer.close()


def test_no_directory_or_no_event_file_is_an_empty_available_report(tmp_path: Path) -> None:
    assert read_scalars(tmp_path / "missing").to_json() == {
        "available": True,
        "reason": None,
        "replicas": {},
    }
    (tmp_path / "worker-0").mkdir()
    assert read_scalars(tmp_path).replicas == {}


def test_each_replicas_series_and_a_subdirectorys_tags_prefixed(tmp_path: Path) -> None:
    write(tmp_path / "worker-0", "loss", [(0, 1.0), (1, 0.5)])
    write(tmp_path / "worker-1" / "eval", "acc", [(3, 0.25)])
    report = read_scalars(tmp_path)
    assert report.replicas == {
        "worker-0": {"loss": [(0, 1.0), (1, 0.5)]},
        "worker-1": {"eval/acc": [(3, 0.25)]},
    }
    assert report.to_json()["replicas"]["worker-0"]["loss"] == [[0, 1.0], [1, 0.5]]


def test_a_later_call_reads_what_was_written_since(tmp_path: Path) -> None:
    write(tmp_path / "worker-0", "loss", [(0, 1.0)])
    assert read_scalars(tmp_path).replicas["worker-0"]["loss"] == [(0, 1.0)]
    write(tmp_path / "worker-0", "loss", [(1, 0.5)])  # a second event file, as a restart makes
    write(tmp_path / "worker-1", "loss", [(0, 2.0)])  # a replica that started writing since
    report = read_scalars(tmp_path)
    assert report.replicas["worker-0"]["loss"] == [(0, 1.0), (1, 0.5)]
    assert report.replicas["worker-1"]["loss"] == [(0, 2.0)]


def test_the_server_never_imports_tensorflow_to_read_them(tmp_path: Path) -> None:
    import subprocess
    import sys

    write(tmp_path / "worker-0", "loss", [(0, 1.0)])
    code = (
        "import sys; from pathlib import Path; from distrun.engines.local.scalars import read_scalars;"
        f"r = read_scalars(Path({str(tmp_path)!r})); assert r.replicas, r;"
        "print('tensorflow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
