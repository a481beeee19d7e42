"""The frameworks distrun knows, with the Kubeflow Training Operator's role names and rules.

This table is the one place that says which roles a framework has, how many of each are
allowed, which role's success completes the job, and what the operator calls things. The
local engine, the Kubernetes engines, the magics parser and the UI's form all read it.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Role:
    name: str  # our name, lower case: the prefix of replica names ("worker-0")
    kubeflow_name: str  # the key in the operator's *ReplicaSpecs map ("Worker")
    min_replicas: int = 0
    max_replicas: int | None = None  # None: bounded only by the operator-set limit
    default_replicas: int = 0


@dataclass(frozen=True)
class Framework:
    name: str
    roles: tuple[Role, ...]
    kubeflow_kind: str | None  # None: no Training Operator kind (generic)
    container_name: str  # the container name the operator's webhook requires
    default_port: int  # the port the operator injects and exposes
    port_name: str
    # Roles whose success completes the job (the operator's default success policy). When
    # none of them is in the spec, the job succeeds when every worker has succeeded.
    completion_roles: tuple[str, ...]
    default_image: str

    def role(self, name: str) -> Role:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)

    @property
    def role_names(self) -> tuple[str, ...]:
        return tuple(role.name for role in self.roles)


FRAMEWORKS: dict[str, Framework] = {
    fw.name: fw
    for fw in (
        Framework(
            name="pytorch",
            roles=(
                Role("master", "Master", min_replicas=1, max_replicas=1, default_replicas=1),
                Role("worker", "Worker", default_replicas=1),
            ),
            kubeflow_kind="PyTorchJob",
            container_name="pytorch",
            default_port=23456,
            port_name="pytorchjob-port",
            completion_roles=("master",),
            default_image="docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        ),
        Framework(
            name="tensorflow",
            roles=(
                Role("chief", "Chief", max_replicas=1),
                Role("ps", "PS"),
                Role("worker", "Worker", default_replicas=2),
                Role("evaluator", "Evaluator", max_replicas=1),
            ),
            kubeflow_kind="TFJob",
            container_name="tensorflow",
            default_port=2222,
            port_name="tfjob-port",
            completion_roles=("chief",),
            default_image="docker.io/tensorflow/tensorflow:2.18.0",
        ),
        Framework(
            name="xgboost",
            roles=(
                Role("master", "Master", min_replicas=1, max_replicas=1, default_replicas=1),
                Role("worker", "Worker", default_replicas=1),
            ),
            kubeflow_kind="XGBoostJob",
            container_name="xgboost",
            default_port=9999,
            port_name="xgboostjob-port",
            completion_roles=("master",),
            default_image="docker.io/kubeflow/xgboost-dist-iris:latest",
        ),
        Framework(
            name="paddle",
            roles=(
                Role("master", "Master", max_replicas=1),
                Role("worker", "Worker", default_replicas=2),
            ),
            kubeflow_kind="PaddleJob",
            container_name="paddle",
            default_port=36543,
            port_name="master",
            completion_roles=("master",),
            default_image="docker.io/paddlepaddle/paddle:2.6.1",
        ),
        Framework(
            name="jax",
            roles=(Role("worker", "Worker", min_replicas=1, default_replicas=2),),
            kubeflow_kind="JAXJob",
            container_name="jax",
            default_port=6666,
            port_name="jaxjob-port",
            completion_roles=(),
            default_image="docker.io/library/python:3.11",
        ),
        Framework(
            name="mpi",
            roles=(
                Role("launcher", "Launcher", min_replicas=1, max_replicas=1, default_replicas=1),
                Role("worker", "Worker", default_replicas=2),
            ),
            kubeflow_kind="MPIJob",
            container_name="mpi",
            default_port=9999,  # MPIJobDefaultPort; v1 launches through kubectl exec, not ssh
            port_name="mpi-port",
            completion_roles=("launcher",),
            default_image="docker.io/mpioperator/openmpi:latest",
        ),
        Framework(
            name="generic",
            roles=(Role("worker", "Worker", min_replicas=1, default_replicas=1),),
            kubeflow_kind=None,
            container_name="main",
            default_port=29500,
            port_name="distrun-port",
            completion_roles=(),
            default_image="docker.io/library/python:3.11",
        ),
    )
}
