"""Sampling what each replica of a local job uses: its process tree's CPU and resident memory,
and, where NVML is there, the GPUs it was granted.

A replica's tree is the replica's process and its descendants. Finding descendants takes a scan
of every process on the machine (each one's parent), so the trees are found again only every
`RESCAN_SECONDS` (or when a replica starts or ends); each sample in between reads the known
processes alone. A process started since the last scan counts from the next one.

Where /proc is readable (capabilities.py's `proc`) a process costs one read of
/proc/PID/stat (CPU times, resident pages, parent, start time): some 17 us a process on the
machine this was built on, against 140-170 us through psutil (which reads /proc/PID/stat and
/proc/PID/statm and builds objects), and one /proc scan for every tree, where psutil's
`children()` scans /proc once per replica. That difference is what keeps sampling within 1 % of
a core (benchmarks/bench_usage.py). Elsewhere (macOS, a sandbox without /proc), psutil.
"""

import os
import time
from collections.abc import Mapping
from typing import Any

import psutil

from distrun.core.usage import GpuUsage, ReplicaUsage
from distrun.engines.local import capabilities
from distrun.engines.local.gpu_devices import Grant

RESCAN_SECONDS = 5.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# (CPU seconds so far, resident bytes, start time): what is read of one process.
Reading = tuple[float, int, object]


class UsageSampler:
    """Samples replicas' process trees. A process's CPU percentage is its CPU time since the
    previous sample over the wall time between them: a process's first sample says 0 %."""

    def __init__(self, gpus: Mapping[str, Grant] | None = None) -> None:
        self._processes: ProcessTable = (
            ProcTable() if capabilities.current().proc else PsutilTable()
        )
        self._trees: dict[str, list[int]] = {}  # replica -> pids, the replica's first
        self._roots: dict[str, int] = {}
        self._scanned_at = 0.0
        self._last: dict[int, tuple[Reading, float]] = {}  # pid -> its last reading and when
        self._gpus = NvmlReader.open(gpus) if gpus else None

    def sample(self, roots: Mapping[str, int]) -> dict[str, ReplicaUsage]:
        """The usage of each replica whose process is `roots[name]` (running replicas); one
        whose processes have all ended is left out."""
        now = time.monotonic()
        if dict(roots) != self._roots or now - self._scanned_at >= RESCAN_SECONDS:
            self._roots = dict(roots)
            self._trees = self._processes.trees(self._roots)
            self._scanned_at = now
        last, self._last = self._last, {}
        usage = {}
        for name, pids in self._trees.items():
            cpu, rss, alive = 0.0, 0, 0
            for pid in pids:
                reading = self._processes.read(pid)
                if reading is None:  # gone since the scan
                    continue
                before = last.get(pid)
                if before is not None and before[0][2] == reading[2] and now > before[1]:
                    cpu += max(0.0, reading[0] - before[0][0]) / (now - before[1]) * 100
                rss += reading[1]
                alive += 1
                self._last[pid] = (reading, now)
            if not alive:  # ended (a zombie not reaped yet): not running any more
                continue
            gpus = self._gpus.usage(name, pids) if self._gpus is not None else ()
            usage[name] = ReplicaUsage(cpu, rss, alive, gpus)
        return usage

    def close(self) -> None:
        if self._gpus is not None:
            self._gpus.close()


class ProcessTable:
    """How processes are read: trees found, one process read."""

    def trees(self, roots: Mapping[str, int]) -> dict[str, list[int]]:
        raise NotImplementedError

    def read(self, pid: int) -> Reading | None:
        raise NotImplementedError


class ProcTable(ProcessTable):
    """Linux's /proc, read directly: one /proc/PID/stat a process."""

    def trees(self, roots: Mapping[str, int]) -> dict[str, list[int]]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = _stat_fields(int(entry))
                if fields is not None:
                    children.setdefault(int(fields[1]), []).append(int(entry))
        trees = {}
        for name, root in roots.items():
            tree, index = [root], 0
            while index < len(tree):  # breadth first; a pid is in one tree at most
                tree += children.get(tree[index], [])
                index += 1
            trees[name] = tree
        return trees

    def read(self, pid: int) -> Reading | None:
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return None
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
        return cpu, int(fields[21]) * _PAGE, fields[19]  # rss pages, start time


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first); None once it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    return stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces


class PsutilTable(ProcessTable):
    """psutil, where /proc is not there to read."""

    def __init__(self) -> None:
        self._objects: dict[int, psutil.Process] = {}

    def trees(self, roots: Mapping[str, int]) -> dict[str, list[int]]:
        trees: dict[str, list[int]] = {}
        found: dict[int, psutil.Process] = {}
        for name, root in roots.items():
            try:
                process = self._objects.get(root) or psutil.Process(root)
                descendants = process.children(recursive=True)
            except psutil.Error:
                continue
            found[root] = process
            found.update((child.pid, self._objects.get(child.pid, child)) for child in descendants)
            trees[name] = [root, *(child.pid for child in descendants)]
        self._objects = found
        return trees

    def read(self, pid: int) -> Reading | None:
        process = self._objects.get(pid)
        if process is None:
            return None
        try:
            with process.oneshot():
                times, memory = process.cpu_times(), process.memory_info()
        except psutil.Error:  # gone, or a zombie
            return None
        return times.user + times.system, memory.rss, process.create_time()


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
