"""Kills whatever a reliability test's jobs left running, even processes that escaped their
process groups, so a failing test does not leave sleepers behind."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from distrun.engines.local.jobdir import JobFiles, interpreter_mark
from distrun.engines.local.processes import kill_job_processes


@pytest.fixture(autouse=True)
def kill_leftover_job_processes(tmp_path: Path) -> Iterator[None]:
    yield
    for job_dir in (tmp_path / "state" / "jobs").glob("*"):
        kill_job_processes(job_dir.name, interpreter_mark(JobFiles(job_dir)))
