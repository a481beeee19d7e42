"""The singleuser notebook server: kernels run behind the gateway, jobs through distrun.

JupyterHub starts each user's server with (see helm/jupyterhub-values.yaml):
  DISTRUN_GATEWAY_URL    required: the gateway's front, e.g. http://distrun-gateway.distrun:8888
  DISTRUN_GATEWAY_TOKEN  required: this user's own gateway token (the hub's profile hook signs
                         it; it names the user)
  DISTRUN_POD_IP         on Kubernetes: this pod's IP (downward API), where remote kernels reach
                         this server when it listens on every address
  DISTRUN_ENGINES        optional JSON: DistrunApp.engines (default: the local engine)
  DISTRUN_JOB_NAMESPACE  this pod's namespace (downward API): where the Kubernetes engines
                         submit when DISTRUN_ENGINES names no namespace (the user's own)
  DISTRUN_DEFAULT_ENGINE optional: DistrunApp.default_engine
and what JupyterHub gives every server it spawns (JUPYTERHUB_USER, JUPYTERHUB_SERVICE_URL,
JUPYTERHUB_API_TOKEN). A required variable missing stops the server with one line naming it:
without it kernels would run beside the server, not behind the gateway.
The test suite loads this same file against a local gateway (tests/gateway) and a real hub
(tests/hub).
"""

import ipaddress
import json
import os
import socket
from urllib.parse import urlsplit, urlunsplit

c = get_config()  # type: ignore[name-defined]  # noqa: F821  (injected by traitlets)


def _required(name: str, what: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        # SystemExit passes the config loader (which logs and ignores any Exception).
        raise SystemExit(f"distrun: {name} is not set: {what}; the server cannot start without it")
    return value


def _reachable_url(service_url: str, pod_ip: str) -> str:
    """This server's URL as a remote kernel reaches it: JupyterHub's service URL, its host
    replaced where the server listens on every address (KubeSpawner's 0.0.0.0)."""
    parts = urlsplit(service_url)
    host = parts.hostname or ""
    try:
        wildcard = not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = False
    if not wildcard:
        return service_url
    host = pod_ip or socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


# --- kernels through the gateway ----------------------------------------------------------
c.GatewayClient.url = _required("DISTRUN_GATEWAY_URL", "the URL of the distrun gateway's front")
c.GatewayClient.auth_token = _required(
    "DISTRUN_GATEWAY_TOKEN", "this user's gateway token, which the hub's profile hook signs"
)
c.GatewayClient.request_timeout = float(os.environ.get("DISTRUN_GATEWAY_REQUEST_TIMEOUT", "300"))
c.GatewayClient.connect_timeout = 60.0
# jupyter_server 2 sends KERNEL_* from its own environment plus these names; the gateway's
# front overwrites KERNEL_USERNAME with the token's user anyway. DISTRUN_TOKEN goes no further
# than the gateway's launcher: a kernel pod reads it from the user's Secret, by reference.
c.GatewayClient.allowed_envs = "DISTRUN_URL,DISTRUN_TOKEN"
# No token in the server log, and no stale upstream websocket on a browser's reconnect
# (distrun/server/gateway_kernels.py says why).
c.ServerApp.session_manager_class = "distrun.server.gateway_kernels.GatewayKernelSessions"
c.ServerApp.kernel_websocket_connection_class = (
    "distrun.server.gateway_kernels.GatewayKernelConnection"
)

user = os.environ.get("JUPYTERHUB_USER")
if user:
    os.environ["KERNEL_USERNAME"] = user

# A remote kernel's %%distrun submits through this very server: tell it where and how.
if "DISTRUN_URL" not in os.environ:
    service_url = os.environ.get("JUPYTERHUB_SERVICE_URL", "")
    pod_ip = os.environ.get("DISTRUN_POD_IP", "")
    if service_url:
        os.environ["DISTRUN_URL"] = _reachable_url(service_url, pod_ip)
    elif pod_ip:  # started by hand, not by a hub
        port = os.environ.get("DISTRUN_SERVER_PORT", "8888")
        os.environ["DISTRUN_URL"] = f"http://{pod_ip}:{port}/"
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
