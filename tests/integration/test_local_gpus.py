"""The local engine on a (fake) multi-GPU machine: real supervisor and replica processes read
the CUDA_VISIBLE_DEVICES they were given. nvidia-smi is a script on PATH answering for three
devices; no real GPU is used."""

from collections.abc import Callable
from pathlib import Path

import pytest

from distrun.core.errors import Conflict, SpecError
from distrun.core.job import JobState
from distrun.core.logs import LogLine
from distrun.engines.local.engine import LocalEngine

from ..reliability import helpers
from ..reliability.helpers import spec

pytestmark = pytest.mark.integration

EngineFactory = Callable[..., LocalEngine]
WAIT = 60.0
SMI = """#!/bin/sh
echo "0, GPU-aaaa, NVIDIA Fake 40GB, 40960 MiB"
echo "1, GPU-bbbb, NVIDIA Fake 40GB, 40960 MiB"
echo "2, GPU-cccc, NVIDIA Fake 40GB, 40960 MiB"
"""
PRINT_ENV = """
import os
names = ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "DISTRUN_GPUS")
print(" ".join(f"{n}={os.environ.get(n, '-')}" for n in names))
"""


@pytest.fixture
def gpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake nvidia-smi first on PATH; returns an MPS pipe directory (no daemon yet)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    mps = tmp_path / "mps"
    mps.mkdir()
    return mps


def lines_by_replica(lines: list[LogLine]) -> dict[str, str]:
    return {line.replica: line.text.rstrip("\n") for line in lines}


async def test_replicas_get_disjoint_devices_and_see_only_theirs(
    make_local_engine: EngineFactory, gpu_machine: Path
) -> None:
    engine = make_local_engine(gpu_discovery="nvidia-smi", mps_pipe_directory=str(gpu_machine))
    info = await engine.info()
    assert [d["uuid"] for d in info.options["gpus"]["devices"]] == [
        "GPU-aaaa",
        "GPU-bbbb",
        "GPU-cccc",
    ]
    roles = {"worker": {"replicas": 2, "resources": {"gpu": 1}}}
    job = await engine.submit(spec(PRINT_ENV, roles=roles), "alice")
    assert [r.gpu for r in job.replicas] == ["GPU 0 (GPU-aaaa)", "GPU 1 (GPU-bbbb)"]
    end, lines = await helpers.follow_to_end(engine, job, "alice", timeout=WAIT)
    assert end.state == JobState.SUCCEEDED
    assert lines_by_replica(lines) == {
        "worker-0": "CUDA_VISIBLE_DEVICES=GPU-aaaa LOCAL_RANK=0 "
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=- DISTRUN_GPUS=0",
        "worker-1": "CUDA_VISIBLE_DEVICES=GPU-bbbb LOCAL_RANK=0 "
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=- DISTRUN_GPUS=1",
    }


async def test_a_running_jobs_devices_are_not_given_to_the_next_job(
    make_local_engine: EngineFactory, gpu_machine: Path, tmp_path: Path
) -> None:
    engine = make_local_engine(gpu_discovery="nvidia-smi", mps_pipe_directory=str(gpu_machine))
    release = tmp_path / "release"
    hold = f"import os, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.05)\n"
    holding = await engine.submit(
        spec(hold, roles={"worker": {"replicas": 2, "resources": {"gpu": 1}}}), "alice"
    )
    with pytest.raises(Conflict, match="hold GPU 0 \\(whole\\), GPU 1 \\(whole\\)"):
        await engine.submit(
            spec(PRINT_ENV, roles={"worker": {"replicas": 2, "resources": {"gpu": 1}}}), "bob"
        )
    with pytest.raises(SpecError, match="asks for 4 whole GPUs in all, but this machine has 3"):
        await engine.submit(
            spec(PRINT_ENV, roles={"worker": {"replicas": 2, "resources": {"gpu": 2}}}), "bob"
        )
    third = await engine.submit(
        spec(PRINT_ENV, roles={"worker": {"replicas": 1, "resources": {"gpu": 1}}}), "bob"
    )
    end, lines = await helpers.follow_to_end(engine, third, "bob", timeout=WAIT)
    assert lines_by_replica(lines)["worker-0"].startswith("CUDA_VISIBLE_DEVICES=GPU-cccc ")
    release.touch()
    end, _ = await helpers.follow_to_end(engine, holding, "alice", timeout=WAIT)
    assert end.state == JobState.SUCCEEDED
    again = await engine.submit(
        spec(PRINT_ENV, roles={"worker": {"replicas": 2, "resources": {"gpu": 1}}}), "bob"
    )
    assert [r.gpu for r in again.replicas] == ["GPU 0 (GPU-aaaa)", "GPU 1 (GPU-bbbb)"]
    await helpers.follow_to_end(engine, again, "bob", timeout=WAIT)


async def test_shares_of_one_device_get_mps_percentages_when_mps_runs(
    make_local_engine: EngineFactory, gpu_machine: Path
) -> None:
    (gpu_machine / "control").touch()  # what the MPS control daemon leaves
    engine = make_local_engine(gpu_discovery="nvidia-smi", mps_pipe_directory=str(gpu_machine))
    assert (await engine.info()).options["gpus"]["mps"] is True
    roles = {"worker": {"replicas": 2, "resources": {"gpu": 0.5}}}
    job = await engine.submit(spec(PRINT_ENV, roles=roles), "alice")
    assert all(r.gpu and r.gpu.startswith("50% of GPU 0 (GPU-aaaa)") for r in job.replicas)
    _, lines = await helpers.follow_to_end(engine, job, "alice", timeout=WAIT)
    seen = "CUDA_VISIBLE_DEVICES=GPU-aaaa LOCAL_RANK=0 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"
    assert set(lines_by_replica(lines).values()) == {f"{seen} DISTRUN_GPUS=0"}


async def test_without_a_gpu_a_gpu_job_is_refused_or_runs_on_the_cpu_when_asked(
    make_local_engine: EngineFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    engine = make_local_engine(gpu_discovery="nvidia-smi")
    roles = {"worker": {"replicas": 1, "resources": {"gpu": 1}}}
    with pytest.raises(SpecError, match="this machine has no GPU"):
        await engine.submit(spec(PRINT_ENV, roles=roles), "alice")
    job = await engine.submit(spec(PRINT_ENV, roles=roles, gpu_fallback="cpu"), "alice")
    assert job.replicas[0].gpu == "no GPU on this machine: runs on the CPU (%gpuFallback=cpu)"
    _, lines = await helpers.follow_to_end(engine, job, "alice", timeout=WAIT)
    assert lines_by_replica(lines)["worker-0"] == (
        "CUDA_VISIBLE_DEVICES= LOCAL_RANK=- CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=- DISTRUN_GPUS=none"
    )
