"""The hub of tests/hub: JupyterHub as an admin configures it on one machine, with what the
distrun deployment adds to it (helm/jupyterhub-values.yaml): the profile hook signing each
user's gateway token at every spawn, and single-user servers loading
gateway_config/singleuser/jupyter_server_config.py, their kernels behind the identity front.

What differs from the Kubernetes deployment: SimpleLocalProcessSpawner instead of KubeSpawner
(every user's server is a local process of the same OS user, its home a directory of its own),
a dummy authenticator with one shared password, and profiles off (no namespaces to make), which
is the chart's `profiles.enabled=false`. Everything comes from DISTRUN_HUB_* variables that
tests/hub/deployment.py sets.
"""

import os
import sys

c = get_config()  # type: ignore[name-defined]  # noqa: F821  (injected by traitlets)
env = os.environ
root = env["DISTRUN_HUB_ROOT"]

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(env["DISTRUN_HUB_PORT"])
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env["DISTRUN_HUB_API_PORT"])
c.JupyterHub.db_url = f"sqlite:///{root}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{root}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = f"{root}/jupyterhub.pid"
c.ConfigurableHTTPProxy.command = [env["DISTRUN_HUB_PROXY"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env['DISTRUN_HUB_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.pid_file = f"{root}/proxy.pid"
c.ConfigurableHTTPProxy.should_start = True

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = env["DISTRUN_HUB_PASSWORD"]
c.Authenticator.allowed_users = set(env["DISTRUN_HUB_USERS"].split(","))

c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = f"{root}/home/{{username}}"
c.Spawner.cmd = [os.path.join(os.path.dirname(sys.executable), "jupyterhub-singleuser")]
if os.getuid() == 0:
    c.Spawner.args = ["--allow-root"]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
# Users named in DISTRUN_HUB_LEGACY_USERS get JupyterHub's single-user server without its
# extension (the legacy app, jupyter_server's own identity provider).
_legacy = set(env.get("DISTRUN_HUB_LEGACY_USERS", "").split(","))
c.Spawner.environment = {
    "DISTRUN_GATEWAY_URL": env["DISTRUN_HUB_GATEWAY_URL"],
    "JUPYTER_CONFIG_DIR": env["DISTRUN_HUB_SINGLEUSER_CONFIG_DIR"],
    "JUPYTERHUB_SINGLEUSER_EXTENSION": lambda spawner: "0" if spawner.user.name in _legacy else "1",
    "PYTHONUNBUFFERED": "1",
}

# --- what helm/jupyterhub-values.yaml adds: the profile hook --------------------------------
sys.path.insert(0, env["DISTRUN_HUB_PROFILES_DIR"])
import distrun_profiles

c.Spawner.pre_spawn_hook = distrun_profiles.pre_spawn_hook

# --- the tier's own admin: spawns servers and hands users tokens over the REST API ----------
c.JupyterHub.services = [{"name": "tier", "api_token": env["DISTRUN_HUB_SERVICE_TOKEN"]}]
c.JupyterHub.load_roles = [
    {
        "name": "tier",
        "scopes": ["admin:users", "admin:servers", "tokens", "read:users"],
        "services": ["tier"],
    }
]
