"""The table the shipped launcher reads (see launcher.py): which replica each (group, index) is,
and every replica's variables, computed by `replica_env` exactly as the local engine does."""

import json

from distrun.core.replica_env import Addresses, mpi_hostfile, replica_env
from distrun.core.spec import JobSpec
from distrun.engines.kube.manifests.common import CODE_DIR
from distrun.engines.kube.manifests.configmap import LAUNCHER_SOURCE, SUPPORT_DIR

TABLE_FILE = "replicas.json"
HOSTFILE = "hostfile"


def support_files(
    spec: JobSpec,
    job_id: str,
    *,
    index_variable: str,
    groups: dict[str, list[str]],
    addresses: Addresses,
) -> dict[str, str]:
    """The launcher, its replica table and, for MPI, the hostfile: files for `code_bundle`."""
    hostfile_path = f"{CODE_DIR}/{SUPPORT_DIR}/{HOSTFILE}"
    env = {
        replica: replica_env(spec, job_id, replica, addresses, hostfile_path=hostfile_path)
        for replica in spec.replica_names()
    }
    table = {
        "index_variable": index_variable,
        "groups": groups,
        "workdir": CODE_DIR,
        "env": env,
    }
    files = {
        "launch.py": LAUNCHER_SOURCE,
        TABLE_FILE: json.dumps(table, indent=1, sort_keys=True),
    }
    if spec.framework == "mpi":
        files[HOSTFILE] = mpi_hostfile(spec, addresses)
    return files
