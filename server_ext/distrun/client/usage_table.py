"""`distrun top JOB`: each replica's newest sampled usage, one row per replica, as
`kubectl top pod` shows pods."""

from typing import Any

from distrun.client.console import table
from distrun.core.usage import GpuUsage, UsageSample, format_bytes, peak_rss


def usage_table(job: dict[str, Any], report: dict[str, Any]) -> str:
    """REPLICA, STATE, CPU (100% is one core), MEMORY (resident), PEAK, LIMIT and GPU (each
    device's utilisation and the replica's memory on it) of every replica of `job`. A replica
    missing from the newest sample (ended, or not started) shows its peak alone."""
    samples = [UsageSample.from_json(sample) for sample in report["samples"]]
    newest = samples[-1].replicas if samples else {}
    limits: dict[str, int] = report.get("memory_limits") or {}
    rows: list[tuple[str, ...]] = [("REPLICA", "STATE", "CPU", "MEMORY", "PEAK", "LIMIT", "GPU")]
    for replica in job["replicas"]:
        name = replica["name"]
        now = newest.get(name)
        peak = peak_rss(samples, name)
        rows.append(
            (
                name,
                replica["state"],
                f"{now.cpu_percent:.0f}%" if now else "-",
                format_bytes(now.rss_bytes) if now else "-",
                format_bytes(peak) if peak is not None else "-",
                format_bytes(limits[name]) if name in limits else "-",
                _gpus(now.gpus) if now and now.gpus else "-",
            )
        )
    return table(rows)


def _gpus(gpus: tuple[GpuUsage, ...]) -> str:
    shown = []
    for gpu in gpus:
        used = "?" if gpu.utilization_percent is None else f"{gpu.utilization_percent:.0f}%"
        memory = "?" if gpu.memory_bytes is None else format_bytes(gpu.memory_bytes)
        shown.append(f"{gpu.index}: {used} {memory}")
    return ", ".join(shown)
