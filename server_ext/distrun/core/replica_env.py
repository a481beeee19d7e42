"""The environment each replica starts with: exactly what the Kubeflow Training Operator injects.

Engines give an `Addresses` map (replica name -> host, port); the local engine maps every host to
loopback with a free port per replica, the Kubernetes engines use the operator's service names
(`service_addresses`). Where the operator points everyone at ONE port (PyTorch's MASTER_PORT),
we use the port of the replica it points at, so the same rule works with a port per replica.

Source of truth: Training Operator v1.9.4 (github.com/kubeflow/trainer, tag v1.9.4, formerly
kubeflow/training-operator); each framework's function names the file it follows.

Precedence, as a pod sees it. The operator APPENDS its variables to the container's env, and
Kubernetes lets the last duplicate win, so the operator's values beat the user's. Our own
variables sit in the pod template after the user's. From lowest to highest:
  1. PYTHONUNBUFFERED=1 (distrun's default, so logs stream live; the user may override it where
     the operator does not set it),
  2. the user's `spec.env`,
  3. DISTRUN_JOB_ID, DISTRUN_REPLICA, DISTRUN_ROLE, DISTRUN_REPLICA_INDEX,
  4. the operator's variables. One upstream exception: the MPI launcher gets I_MPI_HYDRA_BOOTSTRAP
     and I_MPI_HYDRA_BOOTSTRAP_EXEC only when the user has not set them.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass

from distrun.core.errors import EngineError, SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.spec import JobSpec

# Where the MPI operator mounts its ConfigMap on the launcher (mpi/mpijob.go configMountPath).
MPI_HOSTFILE_PATH = "/etc/mpi/hostfile"
MPI_RSH_AGENT_PATH = "/etc/mpi/kubexec.sh"
# One process per replica on every engine: a replica is one process (WORLD_SIZE counts
# replicas), so torchrun started in one should not start more. "auto" (the Training Operator's
# default) means one per GPU, else one per host CPU, whatever the replica asked for; distrun's
# cluster engines ask for 1 (PyTorchJob `nprocPerNode`, TrainJob `numProcPerNode`).
PYTORCH_NPROC_PER_NODE = "1"
# distrun's own defaults, below everything else.
DEFAULT_ENV = {"PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


Addresses = dict[str, Address]  # "worker-0" -> Address


def replica_env(
    spec: JobSpec,
    job_id: str,
    replica: str,
    addresses: Addresses,
    *,
    hostfile_path: str | None = None,
    rsh_agent_path: str | None = None,
) -> dict[str, str]:
    """The variables for `replica` ("worker-1") of `spec`, as a pod on the cluster sees them.

    `hostfile_path` and `rsh_agent_path` matter only to an MPI launcher; None means the
    operator's paths under /etc/mpi.
    """
    env = dict(DEFAULT_ENV)
    env.update(spec.env)
    env.update(distrun_env(spec, job_id, replica))
    env.update(
        operator_env(
            spec,
            job_id,
            replica,
            addresses,
            hostfile_path=hostfile_path,
            rsh_agent_path=rsh_agent_path,
        )
    )
    return env


def distrun_env(spec: JobSpec, job_id: str, replica: str) -> dict[str, str]:
    """distrun's own identity variables, the same for every framework and engine."""
    role, index = split_replica(spec, replica)
    return {
        "DISTRUN_JOB_ID": job_id,
        "DISTRUN_REPLICA": replica,
        "DISTRUN_ROLE": role,
        "DISTRUN_REPLICA_INDEX": str(index),
    }


def operator_env(
    spec: JobSpec,
    job_id: str,
    replica: str,
    addresses: Addresses,
    *,
    hostfile_path: str | None = None,
    rsh_agent_path: str | None = None,
) -> dict[str, str]:
    """Only what the Training Operator appends for `replica`, in the operator's order."""
    role, index = split_replica(spec, replica)
    missing = [name for name in spec.replica_names() if name not in addresses]
    if missing:
        raise EngineError(f"no address for replica(s) {', '.join(missing)} of job {job_id}")
    context = _Replica(
        spec=spec,
        job_id=job_id,
        name=replica,
        role=role,
        index=index,
        addresses=addresses,
        hostfile_path=hostfile_path or MPI_HOSTFILE_PATH,
        rsh_agent_path=rsh_agent_path or MPI_RSH_AGENT_PATH,
    )
    return _GENERATORS[spec.framework](context)


def split_replica(spec: JobSpec, replica: str) -> tuple[str, int]:
    """("worker", 1) for "worker-1"; a SpecError when the job has no such replica."""
    if replica not in spec.replica_names():
        raise SpecError(
            f"the job has no replica {replica!r}; its replicas are {', '.join(spec.replica_names())}"
        )
    role, index = replica.rsplit("-", 1)
    return role, int(index)


def replica_addresses(
    spec: JobSpec, *, host_for: Callable[[str], str], port_for: Callable[[str], int]
) -> Addresses:
    """An address for every replica of `spec`; the callables get the replica name."""
    return {name: Address(host_for(name), port_for(name)) for name in spec.replica_names()}


def service_addresses(
    spec: JobSpec, job_id: str, namespace: str | None, *, cluster_domain: str | None = None
) -> Addresses:
    """The hosts and ports the operator writes into the environment for a job named `job_id`.

    `{job}-{role}-{index}` with the framework's default port; TensorFlow's cluster spec uses
    `{name}.{namespace}.svc[.{cluster_domain}]` (tensorflow/tensorflow.go genClusterSpec); the
    MPI launcher pod is `{job}-launcher` (mpi/mpijob_controller.go newLauncher). With no
    namespace TensorFlow gets the short name, which resolves inside the job's namespace.
    """
    port = FRAMEWORKS[spec.framework].default_port
    return replica_addresses(
        spec,
        host_for=lambda name: _operator_host(spec, job_id, name, namespace, cluster_domain),
        port_for=lambda _name: port,
    )


def mpi_hostfile(spec: JobSpec, addresses: Addresses, slots_per_worker: int = 1) -> str:
    """The launcher's hostfile: one `{host} slots={n}` line per worker, the launcher first when
    it has GPUs (mpi/mpijob_controller.go newConfigMap)."""
    if spec.framework != "mpi":
        raise SpecError(f"a hostfile is only for mpi jobs, not {spec.framework}")
    if slots_per_worker < 1:
        raise SpecError(f"slots per worker must be at least 1, not {slots_per_worker}")
    hosts = [_address(addresses, f"worker-{i}").host for i in range(_replicas(spec, "worker"))]
    if _is_gpu_launcher(spec):
        hosts.insert(0, _address(addresses, "launcher-0").host)
    return "".join(f"{host} slots={slots_per_worker}\n" for host in hosts)


@dataclass(frozen=True)
class _Replica:
    spec: JobSpec
    job_id: str
    name: str
    role: str
    index: int
    addresses: Addresses
    hostfile_path: str
    rsh_agent_path: str

    def address(self, replica: str) -> Address:
        return _address(self.addresses, replica)

    @property
    def total(self) -> int:
        return self.spec.replica_count


def _pytorch(r: _Replica) -> dict[str, str]:
    # pkg/controller.v1/pytorch/envvar.go setPodEnv and pytorch/master.go Generate.
    env = {"PYTHONUNBUFFERED": "1"}
    if "master" in r.spec.roles:
        master = r.address("master-0")
        rank = r.index + 1 if r.role == "worker" else r.index
        # WORLD_SIZE is replicas * nprocPerNode (1).
        env.update(
            {
                "MASTER_PORT": str(master.port),
                "PET_MASTER_PORT": str(master.port),
                "MASTER_ADDR": master.host,
                "PET_MASTER_ADDR": master.host,
                "WORLD_SIZE": str(r.total),
                "RANK": str(rank),
                "PET_NODE_RANK": str(rank),
            }
        )
    # Without a master (the operator's elastic mode) there is no MASTER_ADDR, RANK or WORLD_SIZE.
    env["PET_NPROC_PER_NODE"] = PYTORCH_NPROC_PER_NODE
    env["PET_NNODES"] = str(r.total)
    return env


def _tensorflow(r: _Replica) -> dict[str, str]:
    # pkg/controller.v1/tensorflow/tensorflow.go genTFConfigJSONStr, genClusterSpec;
    # tfjob_controller.go SetClusterSpec skips a job of one replica (isDistributed).
    if r.total == 1:
        return {}
    # Go marshals the ClusterSpec map with sorted keys, every role (evaluator included).
    cluster = {
        role: [r.address(f"{role}-{i}").endpoint for i in range(_replicas(r.spec, role))]
        for role in sorted(r.spec.roles)
    }
    config = {
        "cluster": cluster,
        "task": {"type": r.role, "index": r.index},
        "environment": "cloud",
    }
    return {"TF_CONFIG": json.dumps(config, separators=(",", ":"), ensure_ascii=False)}


def _xgboost(r: _Replica) -> dict[str, str]:
    # pkg/controller.v1/xgboost/xgboost.go SetPodEnv.
    master = r.address("master-0")
    rank = r.index + _replicas(r.spec, "master") if r.role == "worker" else r.index
    env = {
        "MASTER_PORT": str(master.port),
        "MASTER_ADDR": master.host,
        "WORLD_SIZE": str(r.total),
        "RANK": str(rank),
        "PYTHONUNBUFFERED": "1",
    }
    if r.total > 1:
        # For LightGBM: the worker role's port and every worker's host (no port per host).
        workers = [r.address(f"worker-{i}") for i in range(_replicas(r.spec, "worker"))]
        env["WORKER_PORT"] = str(workers[0].port)
        env["WORKER_ADDRS"] = ",".join(worker.host for worker in workers)
    return env


def _paddle(r: _Replica) -> dict[str, str]:
    # pkg/controller.v1/paddlepaddle/envvar.go setPodEnv. Without a master it is collective
    # mode and worker-0 is the rendezvous; with one, PS mode and master-0 is.
    collective = "master" not in r.spec.roles
    rendezvous = r.address("worker-0" if collective else "master-0")
    env = {
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": r.job_id,
        "PADDLE_NNODES": str(r.total),
    }
    if r.name == ("worker-0" if collective else "master-0"):
        # The operator sets POD_IP_DUMMY from status.podIP and PADDLE_MASTER to
        # "$(POD_IP_DUMMY):port", which the kubelet expands: the rendezvous's own address.
        own = r.address(r.name)
        env["POD_IP_DUMMY"] = own.host
        env["PADDLE_MASTER"] = f"{own.host}:{rendezvous.port}"
    else:
        env["PADDLE_MASTER"] = rendezvous.endpoint
    if not collective:
        env["PADDLE_SERVER_NUM" if r.role == "master" else "PADDLE_TRAINER_NUM"] = "1"
    return env


def _jax(r: _Replica) -> dict[str, str]:
    # pkg/controller.v1/jax/envvar.go setPodEnv.
    coordinator = r.address("worker-0")
    return {
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_PORT": str(coordinator.port),
        "COORDINATOR_ADDRESS": coordinator.host,
        "NUM_PROCESSES": str(r.total),
        "PROCESS_ID": str(r.index),
    }


def _mpi(r: _Replica) -> dict[str, str]:
    # pkg/controller.v1/mpi/mpijob_controller.go newLauncher; workers get nothing (newWorker).
    if r.role != "launcher":
        return {}
    env = {
        "OMPI_MCA_plm_rsh_agent": r.rsh_agent_path,
        "OMPI_MCA_orte_default_hostfile": r.hostfile_path,
    }
    if not _is_gpu_launcher(r.spec):
        env["NVIDIA_VISIBLE_DEVICES"] = ""
        env["NVIDIA_DRIVER_CAPABILITIES"] = ""
    if "I_MPI_HYDRA_BOOTSTRAP" not in r.spec.env:
        env["I_MPI_HYDRA_BOOTSTRAP"] = "rsh"
    if "I_MPI_HYDRA_BOOTSTRAP_EXEC" not in r.spec.env:
        env["I_MPI_HYDRA_BOOTSTRAP_EXEC"] = r.rsh_agent_path
    return env


def _generic(r: _Replica) -> dict[str, str]:
    # No operator: torch-style variables so generic code can still rendezvous on replica 0.
    names = r.spec.replica_names()
    first = r.address(names[0])
    return {
        "MASTER_ADDR": first.host,
        "MASTER_PORT": str(first.port),
        "WORLD_SIZE": str(len(names)),
        "RANK": str(names.index(r.name)),
    }


_GENERATORS: dict[str, Callable[[_Replica], dict[str, str]]] = {
    "pytorch": _pytorch,
    "tensorflow": _tensorflow,
    "xgboost": _xgboost,
    "paddle": _paddle,
    "jax": _jax,
    "mpi": _mpi,
    "generic": _generic,
}


def _operator_host(
    spec: JobSpec, job_id: str, replica: str, namespace: str | None, cluster_domain: str | None
) -> str:
    role, index = split_replica(spec, replica)
    if spec.framework == "mpi" and role == "launcher":
        return f"{job_id}-launcher"
    host = f"{job_id}-{role}-{index}"
    if spec.framework == "tensorflow" and namespace:
        host += f".{namespace}.svc"
        if cluster_domain:
            host += f".{cluster_domain}"
    return host


def _is_gpu_launcher(spec: JobSpec) -> bool:
    launcher = spec.roles.get("launcher")
    return launcher is not None and launcher.resources.gpu_request.wanted


def _replicas(spec: JobSpec, role: str) -> int:
    return spec.roles[role].replicas if role in spec.roles else 0


def _address(addresses: Addresses, replica: str) -> Address:
    try:
        return addresses[replica]
    except KeyError:
        raise EngineError(f"no address for replica {replica}") from None
