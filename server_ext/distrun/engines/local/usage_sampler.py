"""Sampling what each replica of a local job uses: its process tree's CPU and resident memory
(psutil), and, where NVML is there, the GPUs it was granted.

A replica's tree is the replica's process and its descendants. Finding descendants takes a scan
of every process on the machine (psutil reads each one's parent), some milliseconds, so the
trees are found again only every `RESCAN_SECONDS`; each sample in between reads the known
processes alone (about 0.1 ms each). A process started since the last scan counts from the
next one; the replica's own process counts from its start.
"""

import time
from collections.abc import Mapping
from typing import Any

import psutil

from distrun.core.usage import GpuUsage, ReplicaUsage
from distrun.engines.local.gpu_devices import Grant

RESCAN_SECONDS = 5.0


class UsageSampler:
    """Samples replicas' process trees; keeps each process's psutil object between samples,
    which is what CPU percentages are measured against (the first sample of a process says
    0 %)."""

    def __init__(self, gpus: Mapping[str, Grant] | None = None) -> None:
        self._processes: dict[int, psutil.Process] = {}  # every process of every tree, by pid
        self._trees: dict[str, list[int]] = {}  # replica -> pids, the replica's first
        self._roots: dict[str, int] = {}
        self._scanned_at = 0.0
        self._gpus = NvmlReader.open(gpus) if gpus else None

    def sample(self, roots: Mapping[str, int]) -> dict[str, ReplicaUsage]:
        """The usage of each replica whose process is `roots[name]` (running replicas)."""
        now = time.monotonic()
        if dict(roots) != self._roots or now - self._scanned_at >= RESCAN_SECONDS:
            self._rescan(roots)
            self._scanned_at = now
        usage = {}
        for name, pids in self._trees.items():
            cpu, rss, alive = 0.0, 0, 0
            for pid in pids:
                measured = self._measure(pid)
                if measured is not None:
                    cpu, rss, alive = cpu + measured[0], rss + measured[1], alive + 1
            gpus = self._gpus.usage(name, pids) if self._gpus is not None else ()
            usage[name] = ReplicaUsage(cpu, rss, alive, gpus)
        return usage

    def close(self) -> None:
        if self._gpus is not None:
            self._gpus.close()

    def _rescan(self, roots: Mapping[str, int]) -> None:
        self._roots = dict(roots)
        trees: dict[str, list[int]] = {}
        for name, root in roots.items():
            process = self._process(root)
            if process is None:
                continue
            try:
                children = process.children(recursive=True)
            except psutil.Error:
                children = []
            for child in children:
                self._processes.setdefault(child.pid, child)
            trees[name] = [root, *(child.pid for child in children)]
        self._trees = trees
        wanted = {pid for pids in trees.values() for pid in pids}
        for pid in set(self._processes) - wanted:
            del self._processes[pid]

    def _process(self, pid: int) -> psutil.Process | None:
        process = self._processes.get(pid)
        if process is None:
            try:
                process = psutil.Process(pid)
            except psutil.Error:
                return None
            self._processes[pid] = process
        return process

    def _measure(self, pid: int) -> tuple[float, int] | None:
        """(CPU percent since the last call, RSS) of a process of a tree; None once it is gone."""
        process = self._processes.get(pid)
        if process is None:
            return None
        try:
            with process.oneshot():
                return process.cpu_percent(), process.memory_info().rss
        except psutil.Error:  # gone (or a zombie) since the scan
            return None


class NvmlReader:
    """The GPUs granted to each replica, through NVML: each device's utilisation and the memory
    the replica's processes hold on it. Built only where pynvml imports and a driver answers."""

    def __init__(self, pynvml: Any, gpus: Mapping[str, Grant]) -> None:
        self._nvml = pynvml
        self._devices = {
            name: [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in grant.devices]
            for name, grant in gpus.items()
            if grant.vendor == "nvidia"
        }

    @classmethod
    def open(cls, gpus: Mapping[str, Grant]) -> "NvmlReader | None":
        try:
            import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
            return cls(pynvml, gpus)
        except pynvml.NVMLError:
            return None

    def usage(self, replica: str, pids: list[int]) -> tuple[GpuUsage, ...]:
        mine = set(pids)
        found = []
        for index, handle in self._devices.get(replica, []):
            try:
                utilization = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                running = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self._nvml.NVMLError:
                found.append(GpuUsage(index, None, None))
                continue
            held = [p.usedGpuMemory or 0 for p in running if p.pid in mine]
            found.append(GpuUsage(index, utilization, sum(held)))
        return tuple(found)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass
