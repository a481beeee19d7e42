"""Usage samples: their JSON, the words for sizes and out-of-memory ends, each replica's limit,
the `distrun top` table, and the bounded series on disk read across its compaction."""

from argparse import Namespace
from pathlib import Path
from typing import Any

from distrun.client.cli import cmd_top
from distrun.client.usage_table import usage_table
from distrun.core.spec import JobSpec
from distrun.core.usage import (
    GpuUsage,
    ReplicaUsage,
    UsageSample,
    format_bytes,
    memory_limits,
    out_of_memory_text,
    peak_rss,
)
from distrun.engines.local.usage_store import UsageTail, UsageWriter

MiB = 1024 * 1024
GiB = 1024 * MiB


def test_a_sample_survives_its_json():
    gpu = GpuUsage(0, 87.0, 3 * GiB)
    sample = UsageSample(4, 1700000000.5, {"worker-0": ReplicaUsage(99.5, 2 * GiB, 3, (gpu,))})
    assert UsageSample.from_json(sample.to_json()) == sample


def test_sizes_and_out_of_memory_read_as_people_write_them():
    sizes = (100, 12 * 1024, 512 * MiB, 200 * MiB + 300 * 1024, int(3.9 * GiB), 4 * GiB)
    assert [format_bytes(n) for n in sizes] == [
        "100 B",
        "12 KiB",
        "512 MiB",
        "200.3 MiB",
        "3.9 GiB",
        "4 GiB",
    ]
    assert out_of_memory_text(int(3.9 * GiB), 4 * GiB) == (
        "killed: out of memory (peak 3.9 GiB of a 4 GiB limit)"
    )
    assert out_of_memory_text(None, None) == "killed: out of memory"
    assert out_of_memory_text(300 * MiB, None) == "killed: out of memory (peak 300 MiB)"


def test_each_replica_gets_its_roles_memory_limit():
    spec = JobSpec.from_dict(
        {
            "framework": "pytorch",
            "code": "pass",
            "roles": {
                "master": {"replicas": 1, "resources": {"memory": "4Gi"}},
                "worker": {"replicas": 2, "resources": {"memory": "1G"}},
            },
        }
    )
    assert memory_limits(spec) == {"master-0": 4 * GiB, "worker-0": 10**9, "worker-1": 10**9}


def test_top_shows_the_newest_sample_and_the_peak_of_each_replica():
    samples = [
        UsageSample(0, 1.0, {"worker-0": ReplicaUsage(50, 3 * GiB, 1), "worker-1": ReplicaUsage(1, MiB, 1)}),
        UsageSample(1, 2.0, {"worker-0": ReplicaUsage(99.6, 2 * GiB, 2, (GpuUsage(1, 40.0, GiB),))}),
    ]  # fmt: skip
    assert peak_rss(samples, "worker-0") == 3 * GiB and peak_rss(samples, "master-0") is None
    job = {"replicas": [{"name": "worker-0", "state": "running"}, {"name": "worker-1", "state": "failed"}]}  # fmt: skip
    report = {"samples": [s.to_json() for s in samples], "memory_limits": {"worker-0": 4 * GiB}}
    assert usage_table(job, report).splitlines() == [
        "REPLICA   STATE    CPU   MEMORY  PEAK   LIMIT  GPU",
        "worker-0  running  100%  2 GiB   3 GiB  4 GiB  1: 40% 1 GiB",
        "worker-1  failed   -     -       1 MiB  -      -",
    ]


def test_the_series_stays_bounded_and_a_reader_goes_on_across_its_compaction(tmp_path: Path):
    path = tmp_path / "usage" / "samples.jsonl"
    writer = UsageWriter(path, keep=3)
    tail = UsageTail(path)
    usage = {"worker-0": ReplicaUsage(1.0, 10, 1)}
    writer.append(0.0, usage)
    assert [s.seq for s in tail.read()] == [0]
    for k in (1, 2):
        writer.append(float(k), usage)
    assert [s.seq for s in tail.read()] == [1, 2]
    for k in range(3, 8):  # at 6 samples the file is replaced by the newest 3
        writer.append(float(k), usage)
    assert [s.seq for s in tail.read()] == [3, 4, 5, 6, 7]
    writer.close()
    assert len(path.read_bytes().splitlines()) <= 5
    assert [s.seq for s in UsageTail(path).read()] == [3, 4, 5, 6, 7]
    assert [s.seq for s in UsageTail(path, since=6).read()] == [6, 7]
    path.write_bytes(path.read_bytes() + b'{"torn": ')  # an unfinished record is not read
    assert [s.seq for s in UsageTail(path, since=7).read()] == [7]


class TopClient:
    """What `distrun top` asks of a client: the job and its usage report."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report

    async def get_job(self, job_id: str) -> dict[str, Any]:
        return {"replicas": [{"name": "worker-0", "state": "running"}]}

    async def usage(self, job_id: str, since: int = 0) -> dict[str, Any]:
        return self.report


NOTE = "GPU: not reported by metrics.k8s.io for worker-0, which requested a GPU: ..."


async def test_top_prints_what_the_engine_cannot_measure_under_the_table(capsys: Any) -> None:
    sample = UsageSample(0, 1.0, {"worker-0": ReplicaUsage(50, GiB, 0)})
    report = {"available": True, "samples": [sample.to_json()], "notes": [NOTE]}
    assert await cmd_top(TopClient(report), Namespace(job_id="a")) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("REPLICA") and out[-1] == f"[distrun] {NOTE}"
    absent = {"available": False, "reason": "metrics-server is not installed", "notes": [NOTE]}
    assert await cmd_top(TopClient(absent), Namespace(job_id="a")) != 0  # type: ignore[arg-type]
    assert capsys.readouterr().err.splitlines() == [
        "distrun: metrics-server is not installed",
        f"[distrun] {NOTE}",
    ]
