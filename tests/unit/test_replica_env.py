"""Each replica's environment against the Training Operator v1.9.4 rule it copies.

Upstream paths are in github.com/kubeflow/trainer at tag v1.9.4 (formerly training-operator).
"""

import json
import subprocess
import sys
from typing import Any

import pytest

from distrun.core.errors import EngineError, SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.replica_env import (
    Address,
    Addresses,
    mpi_hostfile,
    operator_env,
    replica_addresses,
    replica_env,
    service_addresses,
)
from distrun.core.spec import JobSpec

DISTRUN_KEYS = {"DISTRUN_JOB_ID", "DISTRUN_REPLICA", "DISTRUN_ROLE", "DISTRUN_REPLICA_INDEX"}


def make_spec(framework: str, env: dict[str, str] | None = None, **roles: Any) -> JobSpec:
    role_specs = {
        name: value if isinstance(value, dict) else {"replicas": value}
        for name, value in roles.items()
    }
    data: dict[str, Any] = {"framework": framework, "code": "pass", "env": env or {}}
    if role_specs:
        data["roles"] = role_specs
    return JobSpec.from_dict(data)


def local_addresses(spec: JobSpec) -> Addresses:
    """Like the local engine: loopback, a distinct port per replica."""
    ports = {name: 41000 + i for i, name in enumerate(spec.replica_names())}
    return replica_addresses(spec, host_for=lambda _: "127.0.0.1", port_for=ports.__getitem__)


def envs(spec: JobSpec, addresses: Addresses | None = None, **kw: Any) -> dict[str, dict[str, str]]:
    addresses = addresses or local_addresses(spec)
    return {name: replica_env(spec, "j1", name, addresses, **kw) for name in spec.replica_names()}


# --- PyTorch: pytorch/envvar.go setPodEnv, pytorch/master.go MasterEnvVarGenerator ---------


def test_pytorch_master_is_rank_0_and_worker_i_is_rank_i_plus_1() -> None:
    spec = make_spec("pytorch", master=1, worker=3)
    got = envs(spec)
    ranks = {name: (env["RANK"], env["PET_NODE_RANK"]) for name, env in got.items()}
    assert ranks == {
        "master-0": ("0", "0"),
        "worker-0": ("1", "1"),
        "worker-1": ("2", "2"),
        "worker-2": ("3", "3"),
    }


def test_pytorch_every_replica_points_master_addr_and_port_at_master_0() -> None:
    spec = make_spec("pytorch", master=1, worker=2)
    addresses = local_addresses(spec)
    master = addresses["master-0"]
    for env in envs(spec, addresses).values():
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == master.host
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == str(master.port)


def test_pytorch_runs_one_process_per_replica_so_the_world_is_all_replicas() -> None:
    # distrun asks every operator for nprocPerNode 1 (not "auto": one per host CPU on a CPU
    # node); WORLD_SIZE is replicas * nprocPerNode.
    spec = make_spec("pytorch", master=1, worker=4)
    for env in envs(spec).values():
        assert env["WORLD_SIZE"] == "5"
        assert env["PET_NNODES"] == "5"
        assert env["PET_NPROC_PER_NODE"] == "1"
        assert env["PYTHONUNBUFFERED"] == "1"


def test_pytorch_operator_variables_come_in_the_operators_append_order() -> None:
    spec = make_spec("pytorch", master=1, worker=1)
    env = operator_env(spec, "j1", "worker-0", local_addresses(spec))
    assert list(env) == [
        "PYTHONUNBUFFERED",
        "MASTER_PORT",
        "PET_MASTER_PORT",
        "MASTER_ADDR",
        "PET_MASTER_ADDR",
        "WORLD_SIZE",
        "RANK",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
        "PET_NNODES",
    ]


def test_pytorch_job_needs_its_one_master_as_the_operator_webhook_requires() -> None:
    # Without a Master the operator sets no MASTER_*/RANK/WORLD_SIZE (elastic mode, which the
    # spec cannot express), so the spec insists on exactly one master.
    with pytest.raises(SpecError, match="at least 1 master"):
        make_spec("pytorch", master=0, worker=2)
    assert make_spec("pytorch", worker=2).roles["master"].replicas == 1


def test_pytorch_on_the_cluster_uses_the_master_service_name_and_port_23456() -> None:
    spec = make_spec("pytorch", master=1, worker=1)
    env = operator_env(spec, "mnist", "worker-0", service_addresses(spec, "mnist", "team-a"))
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "mnist-master-0",
        "PET_MASTER_ADDR": "mnist-master-0",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "1",
        "PET_NNODES": "2",
    }


# --- TensorFlow: tensorflow/tensorflow.go genTFConfigJSONStr, genClusterSpec ----------------


def test_tf_config_is_byte_for_byte_the_operators_json_with_evaluator_in_the_cluster() -> None:
    # The expected string is upstream's own test case (tensorflow/pod_test.go, namespace ns3).
    spec = make_spec("tensorflow", ps=1, worker=1, evaluator=1)
    env = operator_env(spec, "test-tfjob", "worker-0", service_addresses(spec, "test-tfjob", "ns3"))
    assert env == {
        "TF_CONFIG": '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],'
        '"ps":["test-tfjob-ps-0.ns3.svc:2222"],"worker":["test-tfjob-worker-0.ns3.svc:2222"]},'
        '"task":{"type":"worker","index":0},"environment":"cloud"}'
    }


def test_tf_config_hosts_end_with_the_custom_cluster_domain_when_given() -> None:
    # genClusterSpec appends CUSTOM_CLUSTER_DOMAIN after ".svc".
    spec = make_spec("tensorflow", ps=1, worker=1)
    addresses = service_addresses(spec, "t", "ns2", cluster_domain="tf.training.org")
    config = json.loads(operator_env(spec, "t", "ps-0", addresses)["TF_CONFIG"])
    assert config["cluster"] == {
        "ps": ["t-ps-0.ns2.svc.tf.training.org:2222"],
        "worker": ["t-worker-0.ns2.svc.tf.training.org:2222"],
    }


def test_tf_config_task_names_each_replicas_role_and_index() -> None:
    spec = make_spec("tensorflow", chief=1, ps=2, worker=3, evaluator=1)
    addresses = local_addresses(spec)
    for name, env in envs(spec, addresses).items():
        config = json.loads(env["TF_CONFIG"])
        role, index = name.rsplit("-", 1)
        assert config["task"] == {"type": role, "index": int(index)}
        assert config["environment"] == "cloud"
        assert list(config["cluster"]) == ["chief", "evaluator", "ps", "worker"]  # Go sorts keys
        assert config["cluster"]["worker"] == [addresses[f"worker-{i}"].endpoint for i in range(3)]
        assert config["cluster"]["ps"] == [addresses[f"ps-{i}"].endpoint for i in range(2)]
        assert config["cluster"]["chief"] == [addresses["chief-0"].endpoint]


def test_tf_single_replica_job_gets_no_tf_config() -> None:
    # tfjob_controller.go SetClusterSpec returns early when !isDistributed (one replica in all).
    spec = make_spec("tensorflow", worker=1)
    env = envs(spec)["worker-0"]
    assert "TF_CONFIG" not in env
    assert operator_env(spec, "j1", "worker-0", local_addresses(spec)) == {}


# --- XGBoost: xgboost/xgboost.go SetPodEnv -------------------------------------------------


def test_xgboost_worker_rank_is_offset_by_the_master_and_addrs_list_every_worker() -> None:
    spec = make_spec("xgboost", master=1, worker=2)
    addresses = service_addresses(spec, "xgb", "ns")
    got = {name: operator_env(spec, "xgb", name, addresses) for name in spec.replica_names()}
    shared = {
        "MASTER_PORT": "9999",
        "MASTER_ADDR": "xgb-master-0",
        "WORLD_SIZE": "3",
        "PYTHONUNBUFFERED": "1",
        "WORKER_PORT": "9999",
        "WORKER_ADDRS": "xgb-worker-0,xgb-worker-1",
    }
    assert got == {
        "master-0": {**shared, "RANK": "0"},
        "worker-0": {**shared, "RANK": "1"},
        "worker-1": {**shared, "RANK": "2"},
    }


def test_xgboost_locally_points_master_and_worker_port_at_the_replicas_it_names() -> None:
    spec = make_spec("xgboost", master=1, worker=2)
    addresses = local_addresses(spec)
    env = envs(spec, addresses)["worker-1"]
    assert env["MASTER_PORT"] == str(addresses["master-0"].port)
    assert env["WORKER_PORT"] == str(addresses["worker-0"].port)
    assert env["WORKER_ADDRS"] == "127.0.0.1,127.0.0.1"


def test_xgboost_master_alone_gets_no_worker_port_or_addrs() -> None:
    spec = make_spec("xgboost", master=1, worker=0)
    env = envs(spec)["master-0"]
    assert env["WORLD_SIZE"] == "1" and env["RANK"] == "0"
    assert "WORKER_PORT" not in env and "WORKER_ADDRS" not in env


# --- Paddle: paddlepaddle/envvar.go setPodEnv ----------------------------------------------


def test_paddle_collective_mode_rendezvous_on_worker_0_through_its_pod_ip() -> None:
    spec = make_spec("paddle", master=0, worker=3)
    addresses = service_addresses(spec, "pd", "ns")
    got = {name: operator_env(spec, "pd", name, addresses) for name in spec.replica_names()}
    base = {"PYTHONUNBUFFERED": "1", "PADDLE_JOB_ID": "pd", "PADDLE_NNODES": "3"}
    # On the pod POD_IP_DUMMY is status.podIP; here the replica's own host stands for it.
    assert got["worker-0"] == {
        **base,
        "POD_IP_DUMMY": "pd-worker-0",
        "PADDLE_MASTER": "pd-worker-0:36543",
    }
    assert got["worker-1"] == got["worker-2"] == {**base, "PADDLE_MASTER": "pd-worker-0:36543"}


def test_paddle_ps_mode_rendezvous_on_master_0_with_server_and_trainer_counts() -> None:
    spec = make_spec("paddle", master=1, worker=2)
    addresses = local_addresses(spec)
    got = envs(spec, addresses)
    master = addresses["master-0"]
    assert got["master-0"]["POD_IP_DUMMY"] == master.host
    assert got["master-0"]["PADDLE_MASTER"] == master.endpoint
    assert got["master-0"]["PADDLE_SERVER_NUM"] == "1"
    assert "PADDLE_TRAINER_NUM" not in got["master-0"]
    for name in ("worker-0", "worker-1"):
        assert got[name]["PADDLE_MASTER"] == master.endpoint
        assert got[name]["PADDLE_TRAINER_NUM"] == "1"
        assert "POD_IP_DUMMY" not in got[name] and "PADDLE_SERVER_NUM" not in got[name]
        assert got[name]["PADDLE_NNODES"] == "3" and got[name]["PADDLE_JOB_ID"] == "j1"


# --- JAX: jax/envvar.go setPodEnv ----------------------------------------------------------


def test_jax_process_id_is_the_worker_index_and_worker_0_coordinates() -> None:
    spec = make_spec("jax", worker=3)
    addresses = service_addresses(spec, "jx", None)
    got = {name: operator_env(spec, "jx", name, addresses) for name in spec.replica_names()}
    for i in range(3):
        assert got[f"worker-{i}"] == {
            "PYTHONUNBUFFERED": "1",
            "COORDINATOR_PORT": "6666",
            "COORDINATOR_ADDRESS": "jx-worker-0",
            "NUM_PROCESSES": "3",
            "PROCESS_ID": str(i),
        }


# --- MPI: mpi/mpijob_controller.go newLauncher, newWorker, newConfigMap --------------------


def test_mpi_launcher_gets_ompi_intel_and_blank_nvidia_vars_and_workers_get_none() -> None:
    spec = make_spec("mpi", launcher=1, worker=2)
    addresses = local_addresses(spec)
    assert operator_env(spec, "j1", "launcher-0", addresses) == {
        "OMPI_MCA_plm_rsh_agent": "/etc/mpi/kubexec.sh",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
        "I_MPI_HYDRA_BOOTSTRAP": "rsh",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC": "/etc/mpi/kubexec.sh",
    }
    for worker in ("worker-0", "worker-1"):
        assert operator_env(spec, "j1", worker, addresses) == {}


def test_mpi_launcher_paths_follow_the_hostfile_and_rsh_agent_given() -> None:
    spec = make_spec("mpi", launcher=1, worker=1)
    env = envs(spec, hostfile_path="/tmp/x/hostfile", rsh_agent_path="/tmp/x/rsh")["launcher-0"]
    assert env["OMPI_MCA_orte_default_hostfile"] == "/tmp/x/hostfile"
    assert env["OMPI_MCA_plm_rsh_agent"] == env["I_MPI_HYDRA_BOOTSTRAP_EXEC"] == "/tmp/x/rsh"


def test_mpi_user_intel_bootstrap_values_are_kept_since_the_operator_only_fills_gaps() -> None:
    # newLauncher adds I_MPI_HYDRA_BOOTSTRAP(_EXEC) only when hasIntelMPIBootstrapValues is false.
    spec = make_spec("mpi", env={"I_MPI_HYDRA_BOOTSTRAP": "ssh"}, launcher=1, worker=1)
    env = envs(spec)["launcher-0"]
    assert env["I_MPI_HYDRA_BOOTSTRAP"] == "ssh"
    assert env["I_MPI_HYDRA_BOOTSTRAP_EXEC"] == "/etc/mpi/kubexec.sh"


def test_mpi_gpu_launcher_keeps_nvidia_vars_and_is_listed_first_in_the_hostfile() -> None:
    spec = make_spec(
        "mpi", launcher={"replicas": 1, "resources": {"gpu": 1}}, worker={"replicas": 2}
    )
    addresses = service_addresses(spec, "pi", "ns")
    env = operator_env(spec, "pi", "launcher-0", addresses)
    assert "NVIDIA_VISIBLE_DEVICES" not in env and "NVIDIA_DRIVER_CAPABILITIES" not in env
    assert mpi_hostfile(spec, addresses) == (
        "pi-launcher slots=1\npi-worker-0 slots=1\npi-worker-1 slots=1\n"
    )


def test_mpi_hostfile_has_one_line_per_worker_pod_with_the_slots_given() -> None:
    spec = make_spec("mpi", launcher=1, worker=3)
    assert mpi_hostfile(spec, service_addresses(spec, "pi", "ns"), slots_per_worker=4) == (
        "pi-worker-0 slots=4\npi-worker-1 slots=4\npi-worker-2 slots=4\n"
    )
    local = {name: Address(f"host-{name}", 1) for name in spec.replica_names()}
    assert mpi_hostfile(spec, local).splitlines()[2] == "host-worker-2 slots=1"


def test_mpi_hostfile_rejects_other_frameworks_and_zero_slots() -> None:
    pytorch = make_spec("pytorch")
    with pytest.raises(SpecError, match="only for mpi"):
        mpi_hostfile(pytorch, local_addresses(pytorch))
    mpi = make_spec("mpi")
    with pytest.raises(SpecError, match="at least 1"):
        mpi_hostfile(mpi, local_addresses(mpi), slots_per_worker=0)


# --- generic: no operator, torch-style rendezvous on replica 0 -----------------------------


def test_generic_replicas_get_rank_world_size_and_replica_0_as_master() -> None:
    spec = make_spec("generic", worker=3)
    addresses = local_addresses(spec)
    for i, env in enumerate(envs(spec, addresses).values()):
        assert env["RANK"] == str(i)
        assert env["WORLD_SIZE"] == "3"
        assert env["MASTER_ADDR"] == addresses["worker-0"].host
        assert env["MASTER_PORT"] == str(addresses["worker-0"].port)


# --- every framework -----------------------------------------------------------------------


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_every_replica_of_every_framework_gets_distrun_identity_and_unbuffered_output(
    framework: str,
) -> None:
    spec = make_spec(framework)
    for name, env in envs(spec).items():
        role, index = name.rsplit("-", 1)
        assert env["DISTRUN_JOB_ID"] == "j1"
        assert env["DISTRUN_REPLICA"] == name
        assert env["DISTRUN_ROLE"] == role
        assert env["DISTRUN_REPLICA_INDEX"] == index
        assert env["PYTHONUNBUFFERED"] == "1"


def test_user_env_is_added_but_cannot_override_operator_or_distrun_variables() -> None:
    # The operator appends after the template's env and Kubernetes keeps the last duplicate.
    user = {"MY_FLAG": "on", "RANK": "7", "MASTER_ADDR": "evil", "DISTRUN_REPLICA": "x"}
    spec = make_spec("pytorch", env=user, master=1, worker=1)
    env = envs(spec)["worker-0"]
    assert env["MY_FLAG"] == "on"
    assert env["RANK"] == "1"
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["DISTRUN_REPLICA"] == "worker-0"


def test_user_env_may_override_variables_the_operator_does_not_set() -> None:
    # TFJob sets only TF_CONFIG; PYTHONUNBUFFERED is distrun's default there.
    spec = make_spec("tensorflow", env={"PYTHONUNBUFFERED": "", "TF_CONFIG": "{}"}, worker=2)
    env = envs(spec)["worker-1"]
    assert env["PYTHONUNBUFFERED"] == ""
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_unknown_replica_is_a_spec_error_naming_the_jobs_replicas() -> None:
    spec = make_spec("pytorch", master=1, worker=1)
    with pytest.raises(SpecError, match="no replica 'worker-5'.*master-0, worker-0"):
        replica_env(spec, "j1", "worker-5", local_addresses(spec))


def test_missing_address_is_an_engine_error_naming_the_replica() -> None:
    spec = make_spec("jax", worker=2)
    addresses = local_addresses(spec)
    del addresses["worker-1"]
    with pytest.raises(EngineError, match="worker-1"):
        replica_env(spec, "j1", "worker-0", addresses)


@pytest.mark.parametrize(
    ("framework", "roles", "hosts"),
    [
        ("pytorch", {"master": 1, "worker": 1}, ["j-master-0", "j-worker-0"]),
        ("tensorflow", {"chief": 1, "worker": 1}, ["j-chief-0.ns.svc", "j-worker-0.ns.svc"]),
        ("xgboost", {"master": 1, "worker": 1}, ["j-master-0", "j-worker-0"]),
        ("paddle", {"worker": 2}, ["j-worker-0", "j-worker-1"]),
        ("jax", {"worker": 2}, ["j-worker-0", "j-worker-1"]),
        ("mpi", {"launcher": 1, "worker": 1}, ["j-launcher", "j-worker-0"]),
        ("generic", {"worker": 2}, ["j-worker-0", "j-worker-1"]),
    ],
)
def test_service_addresses_use_operator_names_and_the_frameworks_default_port(
    framework: str, roles: dict[str, int], hosts: list[str]
) -> None:
    spec = make_spec(framework, **roles)
    addresses = service_addresses(spec, "j", "ns")
    assert [a.host for a in addresses.values()] == hosts
    assert {a.port for a in addresses.values()} == {FRAMEWORKS[framework].default_port}


# --- the environment survives a real exec --------------------------------------------------

CHILD = """
import json, os
print(json.dumps({"tf": json.loads(os.environ["TF_CONFIG"]),
                  "replica": os.environ["DISTRUN_REPLICA"],
                  "unbuffered": os.environ["PYTHONUNBUFFERED"]}))
"""


def test_tf_config_reaches_a_real_python_process_per_replica() -> None:
    spec = make_spec("tensorflow", chief=1, ps=1, worker=2, evaluator=1)
    addresses = local_addresses(spec)
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", CHILD],
            env=replica_env(spec, "j1", name, addresses),
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in spec.replica_names()
    }
    expected_cluster = {
        role: [addresses[f"{role}-{i}"].endpoint for i in range(spec.roles[role].replicas)]
        for role in ("chief", "evaluator", "ps", "worker")
    }
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        seen = json.loads(out)
        role, index = name.rsplit("-", 1)
        assert seen["replica"] == name
        assert seen["unbuffered"] == "1"
        assert seen["tf"]["cluster"] == expected_cluster
        assert seen["tf"]["task"] == {"type": role, "index": int(index)}
