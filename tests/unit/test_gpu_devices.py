"""The local engine's GPUs: discovery through NVML or nvidia-smi, and which devices or shares
each replica gets, with what it sees in its environment."""

import sys
import types
from typing import Any

import pytest

from distrun.core.errors import Conflict, SpecError
from distrun.core.spec import JobSpec
from distrun.engines.local import gpu_devices
from distrun.engines.local.gpu_devices import (
    GpuDevice,
    Grant,
    assign,
    discover,
    grant_env,
    mps_running,
    parse_nvidia_smi,
    parse_rocm_smi,
)

SMI_OUTPUT = (
    "0, GPU-aaaa, NVIDIA A100-SXM4-40GB, 40960 MiB\n"
    "1, GPU-bbbb, NVIDIA A100-SXM4-40GB, 40960 MiB\n"
    "2, GPU-cccc, NVIDIA A100-SXM4-40GB, 40960 MiB\n"
)
DEVICES = parse_nvidia_smi(SMI_OUTPUT)


def job(gpu: Any = 1, workers: int = 2, **resources: Any) -> JobSpec:
    role = {"replicas": workers, "resources": {"gpu": gpu, **resources}}
    return JobSpec.from_dict({"framework": "generic", "code": "", "roles": {"worker": role}})


def test_nvidia_smi_lines_become_devices():
    assert DEVICES[1] == GpuDevice(1, "GPU-bbbb", "NVIDIA A100-SXM4-40GB", 40960)
    assert parse_nvidia_smi("No devices were found\n") == []


class FakeNvml(types.ModuleType):
    """pynvml's calls, answering for two devices."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-nvml-{handle}".encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=80 * 1024**3)


def test_discovery_asks_nvml_first(monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert discover("auto") == [
        GpuDevice(0, "GPU-nvml-0", "NVIDIA H100", 81920),
        GpuDevice(1, "GPU-nvml-1", "NVIDIA H100", 81920),
    ]
    assert nvml.shut


def test_discovery_falls_back_to_nvidia_smi_when_nvml_has_no_driver(monkeypatch, tmp_path):
    nvml = FakeNvml()

    def no_driver() -> None:
        raise FakeNvml.NVMLError("Driver Not Loaded")

    nvml.nvmlInit = no_driver  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{SMI_OUTPUT}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert discover("auto") == DEVICES
    assert discover("none") == []


def test_no_nvml_and_no_nvidia_smi_is_no_gpu(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setenv("PATH", str(tmp_path))
    assert discover("auto") == []


def test_mps_is_running_when_its_control_pipe_exists(tmp_path):
    assert not mps_running(str(tmp_path))
    (tmp_path / "control").touch()
    assert mps_running(str(tmp_path))


def test_replicas_get_disjoint_whole_devices_and_see_them_from_zero():
    grants = assign(job(1, workers=3), DEVICES, [], mps=False)
    assert [g.devices for g in grants.values()] == [(0,), (1,), (2,)]
    env = grant_env(grants["worker-1"])
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb"
    assert env["LOCAL_RANK"] == "0" and env["LOCAL_WORLD_SIZE"] == "1"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env


def test_more_gpus_than_the_machine_has_is_refused_with_its_count():
    with pytest.raises(SpecError, match="asks for 4 whole GPUs in all, but this machine has 3"):
        assign(job(2, workers=2), DEVICES, [], mps=False)


def test_devices_running_jobs_hold_are_not_given_again():
    held = [Grant((0,), ("GPU-aaaa",)), Grant((1,), ("GPU-bbbb",), percent=50)]
    grants = assign(job(1, workers=1), DEVICES, held, mps=False)
    assert grants["worker-0"].devices == (2,)
    with pytest.raises(Conflict, match="hold GPU 0 \\(whole\\), GPU 1 \\(50% shared\\)"):
        assign(job(1, workers=2), DEVICES, held, mps=False)


def test_shares_fill_one_device_before_the_next_and_use_mps_where_it_runs():
    grants = assign(job(0.5, workers=3), DEVICES, [], mps=True)
    assert [g.devices for g in grants.values()] == [(0,), (0,), (1,)]
    env = grant_env(grants["worker-0"])
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert "enforced by CUDA MPS" in grants["worker-0"].describe()


def test_a_share_without_mps_says_it_is_not_enforced():
    grant = assign(job(0.3, workers=1), DEVICES, [], mps=False)["worker-0"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in grant_env(grant)
    assert "CUDA MPS is not running" in grant.describe()


def test_shares_never_land_on_a_device_held_whole():
    held = [Grant((0,), ("GPU-aaaa",))]
    assert assign(job(0.5, workers=1), DEVICES, held, mps=False)["worker-0"].devices == (1,)


def test_gpu_memory_is_packed_by_the_devices_memory():
    grants = assign(job(0.1, workers=3, gpu_memory="20Gi"), DEVICES, [], mps=False)
    assert [g.devices for g in grants.values()] == [(0,), (0,), (1,)]
    with pytest.raises(SpecError, match="largest GPU has 40960Mi"):
        assign(job(0.1, workers=1, gpu_memory="50Gi"), DEVICES, [], mps=False)


def test_mig_slices_are_refused_locally_in_words():
    with pytest.raises(SpecError, match="MIG slices are for a cluster engine"):
        assign(job("mig-1g.5gb", workers=1), DEVICES, [], mps=False)


def test_without_gpus_a_gpu_job_is_refused_unless_it_falls_back_to_the_cpu():
    with pytest.raises(SpecError, match="this machine has no GPU .*add %gpuFallback=cpu"):
        assign(job(1), [], [], mps=False)
    spec = JobSpec.from_dict({**job(1).to_dict(), "gpu_fallback": "cpu"})
    grants = assign(spec, [], [], mps=False)
    assert grants["worker-0"].describe() == (
        "no GPU on this machine: runs on the CPU (%gpuFallback=cpu)"
    )
    assert grant_env(grants["worker-0"]) == {
        "CUDA_VISIBLE_DEVICES": "",
        "HIP_VISIBLE_DEVICES": "",
        "DISTRUN_GPUS": "none",
    }


def test_a_job_without_gpu_requests_needs_nothing():
    assert assign(job(0), DEVICES, [], mps=False) == {}


def test_grants_round_trip_through_json():
    grant = Grant((1,), ("GPU-b",), percent=25, memory_mib=100, mps=True, note="x")
    assert Grant.from_json(grant.to_json()) == grant


def test_module_has_the_documented_discovery_choices():
    assert gpu_devices.DISCOVERY == ("auto", "nvml", "nvidia-smi", "rocm-smi", "none")


ROCM_SMI_OUTPUT = (
    '{"card0": {"Unique ID": "0x18f68e602b8a790f", "Card series": "AMD Instinct MI210",'
    ' "VRAM Total Memory (B)": "68702699520"},'
    ' "card1": {"Unique ID": "0x2a", "Card Series": "AMD Instinct MI210",'
    ' "VRAM Total Memory (B)": "68702699520"}, "system": {"Driver version": "6.8"}}'
)


def test_rocm_smi_json_becomes_amd_devices():
    devices = parse_rocm_smi(ROCM_SMI_OUTPUT)
    assert devices == [
        GpuDevice(0, "0x18f68e602b8a790f", "AMD Instinct MI210", 65520, vendor="amd"),
        GpuDevice(1, "0x2a", "AMD Instinct MI210", 65520, vendor="amd"),
    ]
    assert parse_rocm_smi("") == parse_rocm_smi("not json") == []


def test_discovery_finds_amd_gpus_with_rocm_smi_when_nvidia_has_none(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    smi = tmp_path / "rocm-smi"
    smi.write_text(f"#!/bin/sh\nprintf '%s' '{ROCM_SMI_OUTPUT}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert [d.vendor for d in discover("auto")] == ["amd", "amd"]
    assert discover("nvidia-smi") == []


def test_amd_replicas_see_their_devices_through_hip_and_shares_say_they_are_unenforced():
    devices = parse_rocm_smi(ROCM_SMI_OUTPUT)
    grants = assign(job(gpu=1, workers=2), devices, [], mps=True)
    assert grant_env(grants["worker-0"]) == {
        "HIP_VISIBLE_DEVICES": "0",
        "DISTRUN_GPUS": "0",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }
    assert grant_env(grants["worker-1"])["HIP_VISIBLE_DEVICES"] == "1"
    shared = assign(job(gpu=0.5, workers=1), devices, [], mps=True)["worker-0"]
    assert not shared.mps and "ROCm has no MPS" in shared.note
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in grant_env(shared)
    assert Grant.from_json(shared.to_json()) == shared
