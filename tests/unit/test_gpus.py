"""GPU requests: the spec, the header and the CLI read whole GPUs, shares, MIG profiles and GPU
memory into one model, and every Kubernetes GPU mode maps it or refuses it by name."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distrun.client.cli import _role_resources
from distrun.core.errors import SpecError
from distrun.core.gpus import GpuRequest, gpu_request, parse_gpu
from distrun.core.header import parse_cell, render_header, spec_from_cell
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import replica_status
from distrun.engines.kube.gpu_modes import (
    GPU_MODES,
    GpuMode,
    gpu_resources,
    gpu_shortage,
    short_resources,
)
from distrun.engines.kube.manifests.common import ClusterOptions, Target
from distrun.engines.kube.manifests.configmap import code_bundle
from distrun.engines.kube.manifests.kubeflow import kubeflow_job
from distrun.engines.kube.volcano import podgroup_reason

TARGET = Target("j-1", "ns", "ann")


def spec_with(resources: dict[str, object], **extra: object) -> JobSpec:
    roles = {"master": {"replicas": 1}, "worker": {"replicas": 2, "resources": resources}}
    return JobSpec.from_dict({"framework": "pytorch", "code": "", "roles": roles, **extra})


# --- the spec ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "canonical", "request_"),
    [
        (2, 2, GpuRequest(count=2)),
        ("2", 2, GpuRequest(count=2)),
        (0.5, 0.5, GpuRequest(share=0.5)),
        ("0.25", 0.25, GpuRequest(share=0.25)),
        (1.0, 1, GpuRequest(count=1)),
        ("mig-1g.5gb", "mig-1g.5gb", GpuRequest(mig="1g.5gb")),
        ("MIG-3g.20gb", "mig-3g.20gb", GpuRequest(mig="3g.20gb")),
    ],
)
def test_gpu_values_read_as_count_share_or_mig(value, canonical, request_):
    spec = spec_with({"gpu": value})
    assert spec.roles["worker"].resources.gpu == canonical
    assert spec.roles["worker"].resources.gpu_request == request_


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, "more than one GPU is a whole number"),
        (0.001, "between 0.01 and 0.99 in hundredths"),
        ("half", "write a whole number like 1, a share of one GPU like 0.5"),
        ("mig-big", "or a MIG profile like mig-1g.5gb"),
        (True, "is not valid"),
        (17, "between 0 and 16"),
    ],
)
def test_bad_gpu_values_say_what_to_write(value, message):
    with pytest.raises(SpecError) as raised:
        spec_with({"gpu": value})
    assert message in str(raised.value)
    assert raised.value.field == "roles.worker.resources.gpu"


def test_gpu_memory_is_mi_or_gi_and_counts_in_mib():
    spec = spec_with({"gpu": 0.5, "gpu_memory": "10Gi"})
    assert spec.roles["worker"].resources.gpu_request == GpuRequest(share=0.5, memory_mib=10240)
    with pytest.raises(SpecError, match="GPU memory in Mi or Gi, like 10Gi"):
        spec_with({"gpu_memory": "10GB"})


def test_gpu_fallback_is_cpu_or_nothing():
    assert spec_with({"gpu": 1}, gpu_fallback="cpu").gpu_fallback == "cpu"
    with pytest.raises(SpecError, match="write cpu"):
        spec_with({"gpu": 1}, gpu_fallback="tpu")


def test_a_spec_with_shares_round_trips_through_to_dict():
    spec = spec_with({"gpu": 0.5, "gpu_memory": "4Gi"}, gpu_fallback="cpu")
    assert JobSpec.from_dict(spec.to_dict()) == spec


@given(st.integers(min_value=1, max_value=99))
def test_every_hundredth_share_is_accepted_and_reads_back_as_its_percent(hundredths):
    share = hundredths / 100
    request = gpu_request(parse_gpu(share, 16))
    assert request.percent == hundredths and request.shared


# --- the header and the CLI -------------------------------------------------------------------


def test_header_reads_shares_memory_mig_per_role_and_fallback():
    cell = (
        "%framework=pytorch\n%master=1;%gpu=1\n%worker=2;%gpu=0.5;%gpuMemory=10Gi\n"
        "%gpuFallback=cpu\nprint(1)\n"
    )
    spec, _ = spec_from_cell(cell)
    assert spec.roles["master"].resources.gpu == 1
    assert spec.roles["worker"].resources.gpu == 0.5
    assert spec.roles["worker"].resources.gpu_memory == "10Gi"
    assert spec.gpu_fallback == "cpu"


def test_magic_line_and_role_resources_read_gpu_memory_and_mig():
    cell = (
        "%%distrun --framework pytorch --workers 2 --gpu-memory 2Gi "
        "--role-resources worker:gpu=mig-1g.5gb\nx\n"
    )
    spec, _ = spec_from_cell(cell)
    assert spec.roles["worker"].resources.gpu == "mig-1g.5gb"
    assert spec.roles["worker"].resources.gpu_memory == "2Gi"


def test_a_bad_share_in_the_header_names_its_line():
    with pytest.raises(SpecError) as raised:
        spec_from_cell("%framework=pytorch\n%worker=2\n%worker.gpu=1.5\nx\n")
    assert raised.value.line == 3
    assert "worker.gpu '1.5' is more than one GPU but not a whole number" in str(raised.value)
    assert "write %worker.gpu=1" in str(raised.value)


@pytest.mark.parametrize("gpu", [2, 0.5, "mig-2g.10gb"])
def test_rendered_headers_with_gpu_settings_parse_back(gpu):
    fields = {
        "framework": "pytorch",
        "roles": {"worker": {"replicas": 2, "resources": {"gpu": gpu, "gpu_memory": "1Gi"}}},
        "gpu_fallback": "cpu",
    }
    text = render_header(fields)
    assert "%gpuMemory=1Gi" in text and "%gpuFallback=cpu" in text
    assert parse_cell(text + "x\n").spec_fields == fields


def test_cli_role_resources_take_shares_and_gpu_memory():
    assert _role_resources("worker:gpu=0.5,gpuMemory=4Gi") == (
        "worker",
        {"gpu": 0.5, "gpu_memory": "4Gi"},
    )


# --- the Kubernetes GPU modes -----------------------------------------------------------------

WHOLE = GpuRequest(count=2)
SHARE = GpuRequest(share=0.5)
SHARE_MEM = GpuRequest(share=0.25, memory_mib=4096)
MEMORY = GpuRequest(memory_mib=2048)
MIG = GpuRequest(mig="1g.5gb")


@pytest.mark.parametrize(
    ("mode", "request_", "expected"),
    [
        ("whole", WHOLE, {"nvidia.com/gpu": "2"}),
        ("mig", WHOLE, {"nvidia.com/gpu": "2"}),
        ("mig", MIG, {"nvidia.com/mig-1g.5gb": "1"}),
        ("shared", WHOLE, {"nvidia.com/gpu": "2"}),
        ("shared", SHARE, {"nvidia.com/gpu.shared": "1"}),
        ("volcano-vgpu", WHOLE, {"volcano.sh/vgpu-number": "2"}),
        (
            "volcano-vgpu",
            SHARE_MEM,
            {
                "volcano.sh/vgpu-number": "1",
                "volcano.sh/vgpu-memory": "4096",
                "volcano.sh/vgpu-cores": "25",
            },
        ),
        ("volcano-vgpu", MEMORY, {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2048"}),
        ("hami", WHOLE, {"nvidia.com/gpu": "2"}),
        (
            "hami",
            SHARE_MEM,
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "25"},
        ),
        ("hami", SHARE, {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}),
    ],
)
def test_each_mode_maps_what_it_can_express(mode, request_, expected):
    assert gpu_resources(request_, GpuMode(mode)) == expected


@pytest.mark.parametrize(
    ("mode", "request_", "why"),
    [
        ("whole", SHARE, "it cannot share a GPU"),
        ("whole", MIG, "it has no MIG slices"),
        ("whole", MEMORY, "it cannot limit GPU memory"),
        ("mig", SHARE, "it cannot share a GPU"),
        ("shared", MIG, "it has no MIG slices"),
        ("shared", SHARE_MEM, "it cannot limit GPU memory"),
        ("volcano-vgpu", MIG, "it has no MIG slices"),
        ("hami", MIG, "it has no MIG slices"),
    ],
)
def test_each_mode_refuses_what_it_cannot_express_and_says_what_it_offers(mode, request_, why):
    with pytest.raises(SpecError) as raised:
        gpu_resources(request_, GpuMode(mode), "roles.worker.resources.gpu")
    message = str(raised.value)
    assert why in message and f"in {mode!r} mode" in message
    assert f"it offers {GpuMode(mode).offers}" in message
    assert raised.value.field == "roles.worker.resources.gpu"


def test_mig_mode_refuses_a_profile_the_cluster_lacks_naming_those_it_has():
    mode = GpuMode("mig", mig_profiles=("1g.5gb", "2g.10gb"))
    with pytest.raises(SpecError, match="its MIG profiles are mig-1g.5gb, mig-2g.10gb"):
        gpu_resources(GpuRequest(mig="7g.40gb"), mode)


def test_shared_mode_uses_the_configured_resource_name():
    mode = GpuMode("shared", shared_resource="nvidia.com/gpu-ts")
    assert gpu_resources(SHARE, mode) == {"nvidia.com/gpu-ts": "1"}


def test_an_unknown_mode_is_refused_with_the_modes():
    with pytest.raises(SpecError, match="configure one of whole, mig, shared"):
        GpuMode("fractional")


requests = st.one_of(
    st.builds(GpuRequest, count=st.integers(1, 16)),
    st.builds(GpuRequest, share=st.integers(1, 99).map(lambda h: h / 100)),
    st.builds(GpuRequest, mig=st.sampled_from(["1g.5gb", "3g.20gb"])),
    st.builds(
        GpuRequest,
        share=st.none() | st.integers(1, 99).map(lambda h: h / 100),
        memory_mib=st.integers(1, 81920),
    ),
)


@given(st.sampled_from(GPU_MODES), requests)
def test_every_mode_either_maps_to_whole_positive_amounts_or_refuses(mode, request_):
    try:
        amounts = gpu_resources(request_, GpuMode(mode))
    except SpecError as err:
        assert "it offers" in str(err)
        return
    assert amounts and all(int(v) > 0 for v in amounts.values())
    assert set(amounts) <= {*GpuMode(mode).resource_names(), f"nvidia.com/mig-{request_.mig}"}
    if request_.count:
        assert max(int(v) for v in amounts.values()) == request_.count
    if request_.percent is not None and mode in ("volcano-vgpu", "hami"):
        assert str(request_.percent) in amounts.values()


def test_manifests_carry_the_mapped_resources_per_role():
    spec = spec_with({"gpu": 0.5, "gpu_memory": "1Gi"})
    options = ClusterOptions(gpu=GpuMode("hami"))
    job = kubeflow_job(spec, TARGET, options, code_bundle(spec, TARGET))
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "1024",
        "nvidia.com/gpucores": "50",
    }
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert "resources" not in master or not master["resources"]


def test_a_share_on_a_whole_gpu_engine_is_refused_when_the_manifest_is_built():
    spec = spec_with({"gpu": 0.5})
    with pytest.raises(SpecError, match="roles.worker.resources.gpu: this engine's GPUs are in"):
        kubeflow_job(spec, TARGET, ClusterOptions(), code_bundle(spec, TARGET))


def test_scheduler_messages_name_the_short_gpu_resource():
    # What kube-scheduler wrote for a HAMi pod asking for more GPU memory than any node has:
    # nodes without HAMi lack every HAMi resource, the HAMi node lacks only the memory.
    message = (
        "0/6 nodes are available: 4 Insufficient nvidia.com/gpu, 5 Insufficient "
        "nvidia.com/gpucores, 6 Insufficient nvidia.com/gpumem. preemption: 0/6 nodes are "
        "available: 6 No preemption victims found for incoming pod."
    )
    assert short_resources(message) == ["nvidia.com/gpumem"]
    assert gpu_shortage(message) == (
        " [short of GPU resource nvidia.com/gpumem: no node has enough of it free]"
    )
    assert gpu_shortage("0/3 nodes are available: 3 Insufficient memory.") == ""


def test_a_pending_pod_names_the_short_gpu_resource_and_what_it_asked_for():
    message = (
        "0/3 nodes are available: 2 Insufficient nvidia.com/mig-3g.20gb, "
        "3 Insufficient nvidia.com/mig-7g.40gb."
    )
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"resources": {"limits": {"nvidia.com/mig-7g.40gb": "1", "cpu": "1"}}}]
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }
    status = replica_status("master-0", pod)
    assert status.reason == (
        f"Unschedulable: {message} [short of GPU resource nvidia.com/mig-7g.40gb: no node has "
        "enough of it free]"
    )
    assert status.gpu == "nvidia.com/mig-7g.40gb=1 (not yet placed)"


def test_a_volcano_gang_that_waits_names_the_short_gpu_resource():
    group = {
        "spec": {"queue": "default", "minMember": 2},
        "status": {
            "phase": "Inqueue",
            "conditions": [
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "message": "2/2 tasks in gang unschedulable: 0/4 nodes are unavailable: "
                    "4 Insufficient volcano.sh/vgpu-memory.",
                }
            ],
        },
    }
    reason = podgroup_reason(group)
    assert reason is not None
    assert reason.endswith(
        "[short of GPU resource volcano.sh/vgpu-memory: no node has enough of it free]"
    )
