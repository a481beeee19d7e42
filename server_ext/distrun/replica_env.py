"""The environment each replica starts with: exactly what the Kubeflow Training Operator injects.

Engines give an `Addresses` map (replica name -> host, port); the local engine maps every host to
loopback with a free port per replica, the Kubernetes engines use the operator's service names.
"""

from dataclasses import dataclass

from .spec import JobSpec


@dataclass(frozen=True)
class Address:
    host: str
    port: int


Addresses = dict[str, Address]  # "worker-0" -> Address


def replica_env(spec: JobSpec, job_id: str, replica: str, addresses: Addresses) -> dict[str, str]:
    """The variables for `replica` ("worker-1") of `spec`, as the operator sets them."""
    raise NotImplementedError("replica_env is being written (issue 2)")
