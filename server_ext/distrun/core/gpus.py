"""What a replica asks of GPUs: whole devices, a share of one, GPU memory, or a MIG slice.

One model for every engine. A role's ``gpu`` is a whole number (devices), a fraction below 1
(a share of one device: 0.5 is half its compute), or a MIG profile (``mig-1g.5gb``); its
``gpu_memory`` is a memory quantity of one device's memory. Each engine maps the request to
what its machine or cluster offers (`distrun.engines.kube.gpu_modes`,
`distrun.engines.local.gpu_devices`) and refuses what it cannot express.
"""

import re
from dataclasses import dataclass
from typing import Any

from distrun.core.errors import SpecError

GpuAmount = int | float | str  # 2, 0.5, "mig-1g.5gb"
GPU_FALLBACKS = ("cpu",)  # what a job may run on when the machine has no GPU

MIG_PROFILE_RE = re.compile(r"^mig-([1-9][0-9]?g\.[1-9][0-9]{0,3}gb(\+me)?)\Z")
GPU_MEMORY_RE = re.compile(r"^([1-9][0-9]{0,6})(Mi|Gi)\Z")
_DECIMAL_RE = re.compile(r"^[0-9]+(\.[0-9]+)?\Z")
GPU_WRITE = "a whole number like 1, a share of one GPU like 0.5, or a MIG profile like mig-1g.5gb"
GPU_MEMORY_WRITE = "GPU memory in Mi or Gi, like 10Gi or 512Mi"


@dataclass(frozen=True)
class GpuRequest:
    """One replica's GPU request, validated. At most one of `count`, `share` and `mig`."""

    count: int = 0  # whole devices
    share: float | None = None  # a share of one device, 0 < share < 1, in hundredths
    mig: str | None = None  # a MIG profile: "1g.5gb"
    memory_mib: int | None = None  # memory of one device, in MiB

    @property
    def wanted(self) -> bool:
        return bool(self.count or self.share or self.mig or self.memory_mib)

    @property
    def shared(self) -> bool:
        """A part of one device rather than whole ones."""
        return self.share is not None or (self.memory_mib is not None and not self.count)

    @property
    def percent(self) -> int | None:
        """The share as a whole percentage of the device's compute (50 for 0.5)."""
        return None if self.share is None else round(self.share * 100)

    def describe(self) -> str:
        """The request in words, as a header would write it: "0.5 GPU, 10240Mi of GPU memory"."""
        parts = []
        if self.mig:
            parts.append(f"MIG slice {self.mig}")
        elif self.share is not None:
            parts.append(f"{self.share:g} of a GPU")
        elif self.count:
            parts.append(f"{self.count} GPU{'s' if self.count > 1 else ''}")
        if self.memory_mib is not None:
            parts.append(f"{self.memory_mib}Mi of GPU memory")
        return ", ".join(parts) or "no GPU"


def parse_gpu(value: Any, max_count: int, where: str = "gpu") -> GpuAmount:
    """A role's `gpu` in its canonical form: int, float below 1 (hundredths) or "mig-<profile>".

    Accepts the JSON forms (2, 0.5, "mig-1g.5gb") and the header's text ("2", "0.5")."""
    if isinstance(value, bool):
        raise _bad_gpu(value, where)
    if isinstance(value, str) and MIG_PROFILE_RE.match(value.lower()):
        return value.lower()
    if isinstance(value, str) and _DECIMAL_RE.match(value):
        value = int(value) if value.isdigit() else float(value)
    if isinstance(value, int):
        if not 0 <= value <= max_count:
            raise SpecError(f"{where} must be between 0 and {max_count}, not {value}", field=where)
        return value
    if isinstance(value, float):
        return _fraction(value, where)
    raise _bad_gpu(value, where)


def _fraction(value: float, where: str) -> GpuAmount:
    if value.is_integer():
        return int(value)
    if not 0 < value < 1 or round(value, 2) != value:
        raise SpecError(
            f"{where} {value!r} is not a share this server can give; a share of one GPU is "
            "between 0.01 and 0.99 in hundredths (like 0.5); more than one GPU is a whole "
            "number",
            field=where,
        )
    return value


def _bad_gpu(value: Any, where: str) -> SpecError:
    return SpecError(f"{where} {value!r} is not valid; write {GPU_WRITE}", field=where)


def parse_gpu_memory(value: Any, where: str = "gpu_memory") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not GPU_MEMORY_RE.match(value):
        raise SpecError(f"{where} {value!r} is not valid; write {GPU_MEMORY_WRITE}", field=where)
    return value


def memory_mib(quantity: str | None) -> int | None:
    if quantity is None:
        return None
    match = GPU_MEMORY_RE.match(quantity)
    assert match is not None, quantity
    return int(match.group(1)) * (1024 if match.group(2) == "Gi" else 1)


def gpu_request(gpu: GpuAmount, gpu_memory: str | None = None) -> GpuRequest:
    """The request a role's already-validated `gpu` and `gpu_memory` make."""
    mem = memory_mib(gpu_memory)
    if isinstance(gpu, str):
        return GpuRequest(mig=gpu.removeprefix("mig-"), memory_mib=mem)
    if isinstance(gpu, float):
        return GpuRequest(share=gpu, memory_mib=mem)
    return GpuRequest(count=gpu, memory_mib=mem)


def parse_gpu_fallback(value: Any) -> str | None:
    if value is None:
        return None
    if value not in GPU_FALLBACKS:
        raise SpecError(
            f"gpu_fallback {value!r} is not valid; write cpu (run on the CPU when the machine "
            "has no GPU) or leave it out (refuse the job there)",
            field="gpu_fallback",
        )
    return str(value)
