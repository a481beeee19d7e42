"""Enterprise Gateway's configuration, the same for every replica (and for the test suite).

Loaded by `python -m distrun_gateway --config=<this file>`. What differs per deployment comes
from the environment the chart sets (the Secret-backed token, the shared state directory, the
allowed kernels, culling times); the rest is fixed here on purpose.
"""

import os

c = get_config()  # type: ignore[name-defined]  # noqa: F821  (injected by traitlets)


def _env_list(name: str, default: str) -> list[str]:
    return [item for item in os.environ.get(name, default).split(",") if item]


# --- reachable only through the identity front --------------------------------------------
# The front (identity_front.py) runs beside EG in the same pod and is the only client: EG's HTTP
# port listens on loopback, and the token, read from a Secret, is known to the front alone.
c.EnterpriseGatewayApp.ip = os.environ.get("DISTRUN_EG_IP", "127.0.0.1")
c.EnterpriseGatewayApp.port = int(os.environ.get("DISTRUN_EG_PORT", "8889"))
c.EnterpriseGatewayApp.port_retries = 0
c.EnterpriseGatewayApp.auth_token = os.environ["EG_AUTH_TOKEN"]

# --- several replicas ---------------------------------------------------------------------
# Sessions live in a directory every replica mounts; any replica revives a kernel it does not
# know from its persisted session. distrun_gateway.py makes SIGTERM leave kernels running.
c.EnterpriseGatewayApp.availability_mode = "replication"
c.KernelSessionManager.enable_persistence = True
c.KernelSessionManager.persistence_root = os.environ["DISTRUN_GATEWAY_STATE"]

# --- kernels ------------------------------------------------------------------------------
c.KernelSpecManager.whitelist = set(
    _env_list("DISTRUN_ALLOWED_KERNELS", "python_distrun,python_distrun_gpu")
)
c.EnterpriseGatewayApp.default_kernel_name = os.environ.get(
    "DISTRUN_DEFAULT_KERNEL", "python_distrun"
)
c.EnterpriseGatewayApp.max_kernels_per_user = int(
    os.environ.get("DISTRUN_MAX_KERNELS_PER_USER", "10")
)
# Variables a client may set besides KERNEL_*: the front filters KERNEL_* to its own allow-list
# and overwrites KERNEL_USERNAME / KERNEL_NAMESPACE; these reach the kernel so that %%distrun
# in a remote kernel talks to the user's own notebook server.
c.EnterpriseGatewayApp.client_envs = ["DISTRUN_URL", "DISTRUN_TOKEN"]
# The kernel launcher (kernel_pod/launch_kernel_pod.py) sees only these of EG's own variables:
# PATH/HOME, the in-cluster API address, and the operator's kernel pod defaults.
c.EnterpriseGatewayApp.inherited_envs = _env_list(
    "DISTRUN_INHERITED_ENVS", "PATH,HOME,KUBERNETES_SERVICE_HOST,KUBERNETES_SERVICE_PORT"
) + sorted(name for name in os.environ if name.startswith("DISTRUN_KERNEL_"))
c.EnterpriseGatewayApp.list_kernels = True  # the front filters the list to the caller's kernels

# --- culling ------------------------------------------------------------------------------
c.MappingKernelManager.cull_idle_timeout = int(os.environ.get("DISTRUN_CULL_IDLE_SECONDS", "3600"))
c.MappingKernelManager.cull_interval = int(os.environ.get("DISTRUN_CULL_INTERVAL_SECONDS", "60"))
c.MappingKernelManager.cull_connected = False
c.MappingKernelManager.cull_busy = False
