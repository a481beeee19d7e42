"""How a replica's GPU request becomes a pod's extended resources, in the way the cluster's
administrator chose for the engine (`gpu_mode`).

- ``whole``: ``nvidia.com/gpu`` devices only (the NVIDIA device plugin's default).
- ``mig``: whole GPUs, or a MIG slice as ``nvidia.com/mig-<profile>`` (mixed strategy).
- ``shared``: whole GPUs, or a share as one time-sliced replica (``nvidia.com/gpu.shared``,
  the device plugin's ``renameByDefault``; the resource name is configurable).
- ``volcano-vgpu``: Volcano's vGPU device plugin: ``volcano.sh/vgpu-number``,
  ``volcano.sh/vgpu-memory`` (MiB) and ``volcano.sh/vgpu-cores`` (percent).
- ``hami``: HAMi: ``nvidia.com/gpu``, ``nvidia.com/gpumem`` (MiB), ``nvidia.com/gpucores``.

A request the mode cannot express is refused with what the mode can give. Pure functions.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distrun.core.errors import SpecError
from distrun.core.gpus import GpuRequest

GPU_MODES = ("whole", "mig", "shared", "volcano-vgpu", "hami")
WHOLE_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
SHARED_GPU = "nvidia.com/gpu.shared"
VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
VGPU_CORES = "volcano.sh/vgpu-cores"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"

_OFFERS = {
    "whole": "whole GPUs only (%gpu=1)",
    "mig": "whole GPUs (%gpu=1) or a MIG slice (%gpu=mig-1g.5gb)",
    "shared": "whole GPUs (%gpu=1) or a time-sliced share of one (%gpu=0.5), without a memory "
    "limit",
    "volcano-vgpu": "whole GPUs (%gpu=1), a share of one (%gpu=0.5) and GPU memory "
    "(%gpuMemory=10Gi) through Volcano vGPU",
    "hami": "whole GPUs (%gpu=1), a share of one (%gpu=0.5) and GPU memory (%gpuMemory=10Gi) "
    "through HAMi",
}


@dataclass(frozen=True)
class GpuMode:
    """The administrator's choice for one engine."""

    mode: str = "whole"
    shared_resource: str = SHARED_GPU  # the time-sliced resource name in "shared" mode
    mig_profiles: tuple[str, ...] = ()  # the profiles the cluster has ("1g.5gb"); () any

    def __post_init__(self) -> None:
        if self.mode not in GPU_MODES:
            raise SpecError(
                f"gpu_mode {self.mode!r} is not one distrun knows; configure one of "
                f"{', '.join(GPU_MODES)}",
                field="gpu_mode",
            )

    @property
    def offers(self) -> str:
        return _OFFERS[self.mode]

    def describe(self) -> dict[str, object]:
        """What GET /distrun/engines says about it, for forms and users."""
        return {
            "mode": self.mode,
            "offers": self.offers,
            "fractions": self.mode in ("shared", "volcano-vgpu", "hami"),
            "memory": self.mode in ("volcano-vgpu", "hami"),
            "mig_profiles": [f"mig-{p}" for p in self.mig_profiles] if self.mode == "mig" else [],
            "resources": self.resource_names(),
        }

    def resource_names(self) -> list[str]:
        return {
            "whole": [WHOLE_GPU],
            "mig": [WHOLE_GPU, f"{MIG_PREFIX}<profile>"],
            "shared": [WHOLE_GPU, self.shared_resource],
            "volcano-vgpu": [VGPU_NUMBER, VGPU_MEMORY, VGPU_CORES],
            "hami": [WHOLE_GPU, HAMI_MEMORY, HAMI_CORES],
        }[self.mode]


def gpu_resources(request: GpuRequest, mode: GpuMode, where: str = "gpu") -> dict[str, str]:
    """The extended resources (requests = limits) for one replica's `request`."""
    if not request.wanted:
        return {}
    if mode.mode in ("volcano-vgpu", "hami"):
        return _device_share(request, mode, where)
    if request.memory_mib is not None:
        raise _refused(request, mode, where, "it cannot limit GPU memory; leave %gpuMemory out")
    if request.mig:
        return _mig(request, mode, where)
    if request.share is not None:
        if mode.mode != "shared":
            raise _refused(request, mode, where, "it cannot share a GPU")
        return {mode.shared_resource: "1"}
    return {WHOLE_GPU: str(request.count)}


def _mig(request: GpuRequest, mode: GpuMode, where: str) -> dict[str, str]:
    if mode.mode != "mig":
        raise _refused(request, mode, where, "it has no MIG slices")
    if mode.mig_profiles and request.mig not in mode.mig_profiles:
        profiles = ", ".join(f"mig-{p}" for p in mode.mig_profiles)
        raise _refused(request, mode, where, f"its MIG profiles are {profiles}")
    return {f"{MIG_PREFIX}{request.mig}": "1"}


def _device_share(request: GpuRequest, mode: GpuMode, where: str) -> dict[str, str]:
    if request.mig:
        raise _refused(request, mode, where, "it has no MIG slices")
    number, memory, cores = (
        (VGPU_NUMBER, VGPU_MEMORY, VGPU_CORES)
        if mode.mode == "volcano-vgpu"
        else (WHOLE_GPU, HAMI_MEMORY, HAMI_CORES)
    )
    amounts = {number: str(request.count or 1)}
    if request.memory_mib is not None:
        amounts[memory] = str(request.memory_mib)
    if request.percent is not None:
        amounts[cores] = str(request.percent)
    return amounts


def _refused(request: GpuRequest, mode: GpuMode, where: str, why: str) -> SpecError:
    return SpecError(
        f"{where}: this engine's GPUs are in {mode.mode!r} mode and {why}, so it cannot give "
        f"{request.describe()}; it offers {mode.offers}",
        field=where,
    )


def short_resources(message: str) -> list[str]:
    """The GPU resources a scheduler's message ("0/6 nodes are available: 4 Insufficient
    nvidia.com/gpu, 6 Insufficient nvidia.com/gpumem.") says the most nodes are short of: the
    nodes without that kind of GPU at all are short of everything it offers, so the resource
    no node has enough of is the one that stops the pod."""
    counts: dict[str, int] = {}
    for count, name in _INSUFFICIENT.findall(message):
        if name.startswith(_GPU_VENDORS):
            counts[name] = max(counts.get(name, 0), int(count))
    most = max(counts.values(), default=0)
    return [name for name, count in counts.items() if count == most]


_INSUFFICIENT = re.compile(r"([0-9]+) Insufficient ([a-z0-9.-]+/[A-Za-z0-9._-]*[A-Za-z0-9])")
_GPU_VENDORS = ("nvidia.com/", "volcano.sh/vgpu", "amd.com/gpu")


def gpu_shortage(message: str) -> str:
    """What to add to a scheduler's message that names short GPU resources: "" when none."""
    short = short_resources(message)
    if not short:
        return ""
    return f" [short of GPU resource {', '.join(short)}: no node has enough of it free]"


def pod_gpus(pod: Mapping[str, Any]) -> str | None:
    """The GPU resources a replica's pod holds, in words: "nvidia.com/mig-1g.5gb=1 on node
    gpu-3"; None when it holds none."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    held = [f"{name}={limits[name]}" for name in sorted(limits) if name.startswith(_GPU_VENDORS)]
    if not held:
        return None
    node = spec.get("nodeName")
    return ", ".join(held) + (f" on node {node}" if node else " (not yet placed)")
