"""Start one remote kernel's pod: what a distrun kernelspec's argv runs inside the gateway pod.

Enterprise Gateway's KubernetesProcessProxy runs this with the kernel's environment (KERNEL_*
names it computed: id, user, namespace, pod name, image, uid/gid, service account) and then
waits for the pod labelled kernel_id=<id>,component=kernel to report its ports back to the
response address. The pod's own entrypoint (EG's kernel bootstrap in the kernel image) does
that. Here we only render kernel-pod.yaml.j2 with those values plus the operator's defaults
(DISTRUN_KERNEL_*: resources, working dir) and create the pod. Nothing goes through a shell,
and every template value is YAML-quoted.
"""

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATE = Path(__file__).with_name("kernel-pod.yaml.j2")
# Variables the kernel container gets: its identity, how to reach the gateway, and where the
# user's notebook server is. Never a token: DISTRUN_TOKEN, which the notebook server forwards,
# stays in this process; the pod reads it from the user's Secret (DISTRUN_KERNEL_TOKEN_SECRET)
# by reference, so no pod spec holds it.
POD_ENV_PREFIXES = ("KERNEL_", "DISTRUN_URL")
TOKEN_SECRET_KEY = "jupyterhub-api-token"
PROTOCOL_ENV = ("RESPONSE_ADDRESS", "PUBLIC_KEY", "PORT_RANGE")
DEFAULTS = {
    "kernel_cpus": ("DISTRUN_KERNEL_CPU", "500m"),
    "kernel_memory": ("DISTRUN_KERNEL_MEMORY", "1Gi"),
    "kernel_cpus_limit": ("DISTRUN_KERNEL_CPU_LIMIT", "2"),
    "kernel_memory_limit": ("DISTRUN_KERNEL_MEMORY_LIMIT", "4Gi"),
    "kernel_gpus": ("DISTRUN_KERNEL_GPUS", "0"),
    "kernel_working_dir": ("DISTRUN_KERNEL_WORKING_DIR", "/home/jovyan"),
    "kernel_automount_token": ("DISTRUN_KERNEL_AUTOMOUNT_TOKEN", "false"),
}


def yaml_safe(value: Any) -> str:
    """A scalar as a double-quoted YAML string (booleans stay booleans)."""
    if isinstance(value, bool) or value in ("true", "false"):
        return str(value).lower()
    return str(yaml.dump(str(value), default_style='"', width=10_000).strip())


def label_value(text: str) -> str:
    """`text` as a valid label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63]
    return cleaned.strip("._-") or "unknown"


def template_values(kernel_id: str, environ: dict[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {
        name.lower(): value for name, value in environ.items() if name.startswith("KERNEL_")
    }
    for key, (variable, default) in DEFAULTS.items():
        values[key] = environ.get(variable, default)
    values["kernel_id"] = kernel_id
    values["kernel_username_label"] = label_value(values.get("kernel_username", ""))
    return values


def render_pod(
    kernel_id: str, environ: dict[str, str], extra_env: dict[str, str]
) -> dict[str, Any]:
    """The pod object for `kernel_id`; raises ValueError when the template renders anything else."""
    templates = Environment(
        loader=FileSystemLoader(TEMPLATE.parent), undefined=StrictUndefined, autoescape=False
    )
    templates.filters["yaml_safe"] = yaml_safe
    text = templates.get_template(TEMPLATE.name).render(template_values(kernel_id, environ))
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    if len(documents) != 1 or documents[0].get("kind") != "Pod":
        raise ValueError(f"{TEMPLATE.name} must render exactly one Pod")
    pod: dict[str, Any] = documents[0]
    env = {
        name: value
        for name, value in environ.items()
        if name.startswith(POD_ENV_PREFIXES) or name in PROTOCOL_ENV
    }
    env.update(extra_env)
    variables: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    secret = environ.get("DISTRUN_KERNEL_TOKEN_SECRET")
    if secret:
        selector = {"name": secret, "key": TOKEN_SECRET_KEY, "optional": True}
        variables.append({"name": "DISTRUN_TOKEN", "valueFrom": {"secretKeyRef": selector}})
    pod["spec"]["containers"][0]["env"] = variables
    return pod


def create_pod(pod: dict[str, Any]) -> None:
    from kubernetes import client, config

    config.load_incluster_config()  # type: ignore[no-untyped-call]
    api: Any = client.CoreV1Api()  # the client takes a plain dict as well as a V1Pod
    api.create_namespaced_pod(pod["metadata"]["namespace"], pod)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--RemoteProcessProxy.kernel-id", dest="kernel_id", required=True)
    parser.add_argument("--RemoteProcessProxy.port-range", dest="port_range", default="")
    parser.add_argument("--RemoteProcessProxy.response-address", dest="response_address")
    parser.add_argument("--RemoteProcessProxy.public-key", dest="public_key")
    args = parser.parse_args(argv)
    protocol = {
        "KERNEL_ID": args.kernel_id,
        "PORT_RANGE": args.port_range,
        "RESPONSE_ADDRESS": args.response_address or "",
        "PUBLIC_KEY": args.public_key or "",
    }
    try:
        pod = render_pod(args.kernel_id, dict(os.environ), protocol)
        create_pod(pod)
    except Exception as exc:  # noqa: BLE001  (EG shows our exit status and stderr)
        sys.exit(f"distrun: cannot start the pod of kernel {args.kernel_id}: {exc}")


if __name__ == "__main__":
    main()
