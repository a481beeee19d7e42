"""This machine's GPUs, and which of them each replica of a local job gets.

Discovery asks NVML (`nvidia-ml-py`, imported as pynvml), falls back to ``nvidia-smi``, and
finds AMD GPUs with ``rocm-smi`` (ROCm: HIP_VISIBLE_DEVICES instead of CUDA's variables). A
replica that asks for whole GPUs gets devices no other running job holds; one that asks for a
share gets a device with that much of it left (its compute share enforced by CUDA MPS where the
MPS daemon runs, and said to be unenforced where it does not). The grant is recorded in the
job's directory, so the next submission, whatever server makes it, sees what is taken.
"""

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from distrun.core.errors import Conflict, SpecError
from distrun.core.gpus import GpuRequest
from distrun.core.spec import JobSpec

DISCOVERY = ("auto", "nvml", "nvidia-smi", "rocm-smi", "none")
ROCM_SMI_QUERY = ["--showuniqueid", "--showproductname", "--showmeminfo", "vram", "--json"]
NVIDIA_SMI_QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader"]
DEFAULT_MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
FULL = 100  # a device's compute, in percent


@dataclass(frozen=True)
class GpuDevice:
    index: int
    uuid: str
    name: str
    memory_mib: int
    vendor: str = "nvidia"  # or "amd" (ROCm)

    def label(self) -> str:
        return f"GPU {self.index} ({self.name}, {self.uuid})"


@dataclass(frozen=True)
class Grant:
    """What one replica got: whole devices, or a share of one."""

    devices: tuple[int, ...]
    uuids: tuple[str, ...]
    percent: int | None = None  # a share of devices[0]; None: whole devices
    memory_mib: int | None = None
    mps: bool = False  # the share's compute is limited by CUDA MPS
    note: str = ""  # how the share is enforced, or that the replica runs on the CPU
    vendor: str = "nvidia"  # whose variables make the devices visible: "nvidia" or "amd"

    @property
    def whole(self) -> bool:
        return self.percent is None and self.memory_mib is None

    def describe(self) -> str:
        if not self.devices:
            return self.note
        gpus = ", ".join(f"GPU {i} ({u})" for i, u in zip(self.devices, self.uuids, strict=True))
        if self.whole:
            return gpus
        parts = [f"{self.percent}%" if self.percent is not None else "a share"]
        if self.memory_mib is not None:
            parts.append(f"{self.memory_mib}Mi of memory")
        return f"{' and '.join(parts)} of {gpus}" + (f"; {self.note}" if self.note else "")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Grant":
        return cls(**{**data, "devices": tuple(data["devices"]), "uuids": tuple(data["uuids"])})


# --- discovery --------------------------------------------------------------------------------


def discover(how: str = "auto") -> list[GpuDevice]:
    """This machine's GPUs, in index order (NVIDIA's, else AMD's); [] when there are none (or
    `how` is none)."""
    if how in ("auto", "nvml"):
        found = _from_nvml()
        if found is not None or how == "nvml":
            return found or []
    if how in ("auto", "nvidia-smi"):
        found = _from_nvidia_smi()
        if found or how == "nvidia-smi":
            return found
    if how in ("auto", "rocm-smi"):
        return _from_rocm_smi()
    return []


def _from_nvml() -> list[GpuDevice] | None:
    """None when NVML is not installed or has no driver to talk to."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return [_nvml_device(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def _nvml_device(pynvml: Any, index: int) -> GpuDevice:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return GpuDevice(
        index=index,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _from_nvidia_smi() -> list[GpuDevice]:
    return parse_nvidia_smi(_run_smi("nvidia-smi", NVIDIA_SMI_QUERY))


def _from_rocm_smi() -> list[GpuDevice]:
    return parse_rocm_smi(_run_smi("rocm-smi", ROCM_SMI_QUERY))


def _run_smi(command: str, query: list[str]) -> str:
    """What the tool printed; "" when it is absent, fails (no driver, no device) or hangs."""
    smi = shutil.which(command)
    if smi is None:
        return ""
    try:
        done = subprocess.run(
            [smi, *query], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def parse_rocm_smi(text: str) -> list[GpuDevice]:
    """rocm-smi's JSON: {"card0": {"Unique ID": "0x..", "Card series": "..",
    "VRAM Total Memory (B)": ".."}, ...} (key spellings vary between ROCm versions)."""
    try:
        cards = json.loads(text) if text.strip() else {}
    except ValueError:
        return []
    devices = []
    for card, fields in cards.items() if isinstance(cards, dict) else ():
        index = card.removeprefix("card")
        if not index.isdigit() or not isinstance(fields, dict):
            continue
        lower = {str(k).lower(): str(v) for k, v in fields.items()}
        memory = lower.get("vram total memory (b)", "0")
        name = lower.get("card series") or lower.get("card model") or "AMD GPU"
        uuid = lower.get("unique id") or f"card{index}"
        mib = int(memory) // (1024 * 1024) if memory.isdigit() else 0
        devices.append(GpuDevice(int(index), uuid, name, mib, vendor="amd"))
    return sorted(devices, key=lambda d: d.index)


def parse_nvidia_smi(text: str) -> list[GpuDevice]:
    """`index, uuid, name, memory.total` lines ("0, GPU-1a.., NVIDIA A100, 40960 MiB")."""
    devices = []
    for line in text.splitlines():
        fields = [part.strip() for part in line.split(",")]
        if len(fields) < 4 or not fields[0].isdigit():
            continue
        index, uuid, name, memory = fields[0], fields[1], ", ".join(fields[2:-1]), fields[-1]
        mib = memory.removesuffix("MiB").strip()
        devices.append(GpuDevice(int(index), uuid, name, int(mib) if mib.isdigit() else 0))
    return sorted(devices, key=lambda d: d.index)


def mps_running(pipe_directory: str | None = None) -> bool:
    """Whether a CUDA MPS control daemon listens (its pipe directory has a control pipe)."""
    directory = (
        pipe_directory or os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_MPS_PIPE_DIRECTORY
    )
    return (Path(directory) / "control").exists()


# --- assignment -------------------------------------------------------------------------------


@dataclass
class _Usage:
    """What running jobs hold of one device."""

    whole: bool = False
    percent: int = 0
    memory_mib: int = 0
    shared: bool = False


def assign(
    spec: JobSpec,
    devices: list[GpuDevice],
    held: Iterable[Grant],
    *,
    mps: bool,
) -> dict[str, Grant]:
    """Every replica that asks for GPUs -> its grant. Refuses (SpecError) what this machine
    cannot give at all and (Conflict) what running jobs hold now."""
    wanted = {name: _request(spec, name) for name in spec.replica_names()}
    wanted = {name: req for name, req in wanted.items() if req.wanted}
    if not wanted:
        return {}
    if not devices:
        return _without_gpus(spec, wanted)
    _check_fits(wanted, devices)
    usage = _usage(devices, held)
    grants = {}
    for name, request in wanted.items():
        grant = _grant(name, request, devices, usage, mps)
        _take(usage, grant)
        grants[name] = grant
    return grants


def _request(spec: JobSpec, replica: str) -> GpuRequest:
    role = replica.rsplit("-", 1)[0]
    return spec.roles[role].resources.gpu_request


def _without_gpus(spec: JobSpec, wanted: Mapping[str, GpuRequest]) -> dict[str, Grant]:
    if spec.gpu_fallback == "cpu":
        note = "no GPU on this machine: runs on the CPU (%gpuFallback=cpu)"
        return {name: Grant((), (), note=note) for name in wanted}
    first = next(iter(wanted))
    raise SpecError(
        f"{first} asks for {wanted[first].describe()}, but this machine has no GPU (NVML, "
        "nvidia-smi and rocm-smi found none); add %gpuFallback=cpu to run on the CPU instead, or "
        "use a cluster engine",
        field=f"roles.{first.rsplit('-', 1)[0]}.resources.gpu",
    )


def _check_fits(wanted: Mapping[str, GpuRequest], devices: list[GpuDevice]) -> None:
    whole = sum(request.count for request in wanted.values())
    if whole > len(devices):
        raise SpecError(
            f"the job asks for {whole} whole GPUs in all, but this machine has "
            f"{len(devices)}: {', '.join(d.label() for d in devices)}; ask for at most "
            f"{len(devices)}, or share one (%gpu=0.5)",
            field="roles",
        )
    for name, request in wanted.items():
        if request.mig:
            raise SpecError(
                f"{name} asks for MIG slice {request.mig}; the local engine gives whole GPUs "
                "and shares of one (%gpu=1, %gpu=0.5); MIG slices are for a cluster engine",
                field=f"roles.{name.rsplit('-', 1)[0]}.resources.gpu",
            )
        largest = max(d.memory_mib for d in devices)
        if request.memory_mib is not None and request.memory_mib > largest:
            raise SpecError(
                f"{name} asks for {request.memory_mib}Mi of GPU memory; this machine's largest "
                f"GPU has {largest}Mi",
                field=f"roles.{name.rsplit('-', 1)[0]}.resources.gpu_memory",
            )


def _usage(devices: list[GpuDevice], held: Iterable[Grant]) -> dict[int, _Usage]:
    usage = {device.index: _Usage() for device in devices}
    for grant in held:
        _take(usage, grant)
    return usage


def _take(usage: dict[int, _Usage], grant: Grant) -> None:
    for index in grant.devices:
        use = usage.setdefault(index, _Usage())
        if grant.whole:
            use.whole = True
        else:
            use.shared = True
            use.percent += grant.percent or 0
            use.memory_mib += grant.memory_mib or 0


def _grant(
    name: str, request: GpuRequest, devices: list[GpuDevice], usage: dict[int, _Usage], mps: bool
) -> Grant:
    if request.count:
        free = [d for d in devices if not usage[d.index].whole and not usage[d.index].shared]
        if len(free) < request.count:
            raise _busy(name, request, devices, usage)
        chosen = free[: request.count]
        indices, uuids = tuple(d.index for d in chosen), tuple(d.uuid for d in chosen)
        return Grant(indices, uuids, vendor=chosen[0].vendor)
    for device in devices:
        use = usage[device.index]
        percent = request.percent or 0
        fits = (
            not use.whole
            and use.percent + percent <= FULL
            and use.memory_mib + (request.memory_mib or 0) <= device.memory_mib
        )
        if fits:
            return Grant(
                (device.index,),
                (device.uuid,),
                percent=request.percent,
                memory_mib=request.memory_mib,
                mps=mps and request.percent is not None and device.vendor == "nvidia",
                note=_share_note(request, mps and device.vendor == "nvidia", device.vendor),
                vendor=device.vendor,
            )
    raise _busy(name, request, devices, usage)


def _share_note(request: GpuRequest, mps: bool, vendor: str = "nvidia") -> str:
    notes = []
    if request.percent is not None and vendor == "amd":
        notes.append("ROCm has no MPS: the compute share is not enforced (time-shared)")
    elif request.percent is not None:
        notes.append(
            "compute share enforced by CUDA MPS"
            if mps
            else "CUDA MPS is not running, so the compute share is not enforced (time-shared)"
        )
    if request.memory_mib is not None:
        notes.append("GPU memory is not limited locally; the replica should stay within it")
    return "; ".join(notes)


def _busy(
    name: str, request: GpuRequest, devices: list[GpuDevice], usage: dict[int, _Usage]
) -> Conflict:
    taken = [
        f"GPU {i} {'(whole)' if u.whole else f'({u.percent}% shared)'}"
        for i, u in usage.items()
        if u.whole or u.shared
    ]
    return Conflict(
        f"{name} asks for {request.describe()}, but running jobs (or this job's other replicas) "
        f"hold {', '.join(taken) or 'them'} of this machine's {len(devices)} GPUs; wait for "
        "one to finish, or ask for a share (%gpu=0.5)"
    )


# --- what a replica's process sees -----------------------------------------------------------


def grant_env(grant: Grant) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES and friends for one replica. It sees only its devices, numbered from
    0, so LOCAL_RANK 0 is its first: one replica is one node, as on the cluster."""
    if not grant.devices:  # the CPU fallback: no device at all
        return hide_gpus()
    if grant.vendor == "amd":  # ROCm numbers devices by index; HIP's variable is PyTorch's
        indices = ",".join(str(i) for i in grant.devices)
        return {
            "HIP_VISIBLE_DEVICES": indices,
            "DISTRUN_GPUS": indices,
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
        }
    env = {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(grant.uuids),
        "DISTRUN_GPUS": ",".join(str(i) for i in grant.devices),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }
    if grant.mps and grant.percent is not None:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(grant.percent)
    return env


def hide_gpus() -> dict[str, str]:
    """For a replica that got no GPU on a machine with some: none visible, so it cannot use
    another's."""
    return {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "DISTRUN_GPUS": "none"}
