"""The singleuser notebook server: kernels run behind the gateway, jobs through distrun.

JupyterHub's KubeSpawner starts each user's server with (see helm/jupyterhub-values.yaml):
  DISTRUN_GATEWAY_URL    the gateway Service, e.g. http://distrun-gateway.distrun:8888
  DISTRUN_GATEWAY_TOKEN  this user's own gateway token (the hub signs it; it names the user)
  DISTRUN_POD_IP         this pod's IP (downward API), so remote kernels can reach the server
  DISTRUN_ENGINES        optional JSON: DistrunApp.engines (default: the local engine)
  DISTRUN_JOB_NAMESPACE  this pod's namespace (downward API): where the Kubernetes engines
                         submit when DISTRUN_ENGINES names no namespace (the user's own)
  DISTRUN_DEFAULT_ENGINE optional: DistrunApp.default_engine
The test suite loads this same file against a local gateway.
"""

import json
import os

c = get_config()  # type: ignore[name-defined]  # noqa: F821  (injected by traitlets)

# --- kernels through the gateway ----------------------------------------------------------
c.GatewayClient.url = os.environ["DISTRUN_GATEWAY_URL"]
c.GatewayClient.auth_token = os.environ["DISTRUN_GATEWAY_TOKEN"]
c.GatewayClient.request_timeout = float(os.environ.get("DISTRUN_GATEWAY_REQUEST_TIMEOUT", "300"))
c.GatewayClient.connect_timeout = 60.0
# jupyter_server 2 sends KERNEL_* from its own environment plus these names; the gateway's
# front overwrites KERNEL_USERNAME with the token's user anyway. DISTRUN_TOKEN goes no further
# than the gateway's launcher: a kernel pod reads it from the user's Secret, by reference.
c.GatewayClient.allowed_envs = "DISTRUN_URL,DISTRUN_TOKEN"

user = os.environ.get("JUPYTERHUB_USER")
if user:
    os.environ["KERNEL_USERNAME"] = user

# A remote kernel's %%distrun submits through this very server: tell it where and how.
if "DISTRUN_URL" not in os.environ and os.environ.get("DISTRUN_POD_IP"):
    port = os.environ.get("DISTRUN_SERVER_PORT", "8888")
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    os.environ["DISTRUN_URL"] = f"http://{os.environ['DISTRUN_POD_IP']}:{port}{prefix}"
if "DISTRUN_TOKEN" not in os.environ and os.environ.get("JUPYTERHUB_API_TOKEN"):
    os.environ["DISTRUN_TOKEN"] = os.environ["JUPYTERHUB_API_TOKEN"]

# --- distrun engines ----------------------------------------------------------------------
if os.environ.get("DISTRUN_ENGINES"):
    engines = json.loads(os.environ["DISTRUN_ENGINES"])
    job_namespace = os.environ.get("DISTRUN_JOB_NAMESPACE")
    for entry in engines.values():
        if job_namespace and ".kube." in entry.get("class", ""):
            entry.setdefault("kwargs", {}).setdefault("namespace", job_namespace)
    c.DistrunApp.engines = engines
if os.environ.get("DISTRUN_DEFAULT_ENGINE"):
    c.DistrunApp.default_engine = os.environ["DISTRUN_DEFAULT_ENGINE"]
