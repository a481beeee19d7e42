"""What each replica of a job uses, sampled over time: CPU, resident memory and GPUs.

A `UsageSample` is one moment for every replica running then; its `seq` numbers the job's
samples from 0, gap-free, so a reader resumes after the last one it has (`since`). An engine
keeps a bounded series (the newest samples) and says in a `UsageReport` whether it samples at
all, and why not.
"""

from dataclasses import dataclass, field
from typing import Any

from distrun.core.quantities import quantity_value
from distrun.core.spec import JobSpec


@dataclass(frozen=True)
class GpuUsage:
    """One device a replica holds: the device's utilisation (all its processes, as NVML reports
    it) and the memory the replica's processes have on it."""

    index: int
    utilization_percent: float | None
    memory_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "utilization_percent": self.utilization_percent,
            "memory_bytes": self.memory_bytes,
        }


@dataclass(frozen=True)
class ReplicaUsage:
    """A replica's process tree at one moment: CPU in percent of one core since the previous
    sample (200 = two cores busy), resident memory summed over its processes, and how many
    processes the tree had."""

    cpu_percent: float
    rss_bytes: int
    processes: int
    gpus: tuple[GpuUsage, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "cpu_percent": round(self.cpu_percent, 1),
            "rss_bytes": self.rss_bytes,
            "processes": self.processes,
            "gpus": [gpu.to_json() for gpu in self.gpus],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ReplicaUsage":
        gpus = tuple(GpuUsage(**gpu) for gpu in data.get("gpus", []))
        return cls(float(data["cpu_percent"]), int(data["rss_bytes"]), int(data["processes"]), gpus)


@dataclass(frozen=True)
class UsageSample:
    seq: int  # the job's samples are numbered from 0
    time: float  # epoch seconds
    replicas: dict[str, ReplicaUsage]  # the replicas running when it was taken

    def to_json(self) -> dict[str, Any]:
        replicas = {name: usage.to_json() for name, usage in self.replicas.items()}
        return {"seq": self.seq, "time": round(self.time, 3), "replicas": replicas}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "UsageSample":
        replicas = {
            str(name): ReplicaUsage.from_json(usage) for name, usage in data["replicas"].items()
        }
        return cls(int(data["seq"]), float(data["time"]), replicas)


@dataclass(frozen=True)
class UsageUpdate:
    """New samples of a followed job, oldest first."""

    samples: list[UsageSample]


@dataclass(frozen=True)
class UsageReport:
    """What an engine can say of a job's usage: the samples after `since` that it still keeps
    (the newest ones; older ones were dropped to keep the series bounded), each replica's
    memory limit in bytes where the spec set one, when it does not sample, why, and what it
    cannot measure of this job, in words (`notes`: a GPU the cluster does not report)."""

    available: bool
    reason: str | None = None
    interval_seconds: float | None = None
    samples: list[UsageSample] = field(default_factory=list)
    memory_limits: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def next_seq(self) -> int | None:
        """Where to resume: the seq after the newest sample here; None when there is none."""
        return self.samples[-1].seq + 1 if self.samples else None

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "interval_seconds": self.interval_seconds,
            "memory_limits": self.memory_limits,
            "samples": [sample.to_json() for sample in self.samples],
            "next": self.next_seq,
            "notes": self.notes,
        }


def memory_limits(spec: JobSpec) -> dict[str, int]:
    """Each replica's memory limit in bytes, for the replicas whose role sets `memory`."""
    limits: dict[str, int] = {}
    for name in spec.replica_names():
        memory = spec.roles[name.rpartition("-")[0]].resources.memory
        if memory is not None:
            limits[name] = int(quantity_value(memory))
    return limits


def gpu_replicas(spec: JobSpec) -> list[str]:
    """The replicas whose role requests a GPU (whole, a share, a MIG slice or GPU memory)."""
    return [
        name
        for name in spec.replica_names()
        if spec.roles[name.rpartition("-")[0]].resources.gpu_request.wanted
    ]


def peak_rss(samples: list[UsageSample], replica: str) -> int | None:
    """The largest resident memory sampled for `replica`; None if it was never sampled."""
    seen = [s.replicas[replica].rss_bytes for s in samples if replica in s.replicas]
    return max(seen) if seen else None


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(count: int) -> str:
    """`count` bytes for people, in binary units: 3.9 GiB, 512 MiB, 200.3 MiB, 100 B."""
    value = float(count)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{count} B"
    # A tenth always, unless whole: a peak just over its limit must not read as the limit.
    return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"


def out_of_memory_text(peak: int | None, limit: int | None) -> str:
    """How a replica killed for memory ended: 'killed: out of memory (peak 3.9 GiB of a 4 GiB
    limit)', with what is known of its peak and limit."""
    if peak is not None and limit is not None:
        detail = f" (peak {format_bytes(peak)} of a {format_bytes(limit)} limit)"
    elif peak is not None:
        detail = f" (peak {format_bytes(peak)})"
    elif limit is not None:
        detail = f" (a {format_bytes(limit)} limit)"
    else:
        detail = ""
    return f"killed: out of memory{detail}"


def failure_text(replica: str, cause: str) -> str:
    """'worker-1 failed: exit code 3', or, for a replica killed for its memory,
    'worker-1 killed: out of memory (peak 3.9 GiB of a 4 GiB limit)'."""
    return f"{replica} {cause}" if cause.startswith("killed:") else f"{replica} failed: {cause}"
