"""Per-user namespaces for JupyterHub on Kubernetes, the way Kubeflow's Profiles do it: each user's
notebook server, kernels and jobs live in a namespace of their own, and no credential in any of
their pods reaches beyond it.

JupyterHub (KubeSpawner) calls two hooks, installed by helm/jupyterhub-values.yaml:

- `pre_spawn_hook(spawner)` creates the user's namespace, or finds it made for them before (any
  other namespace of that name, and the hub's, the gateway's or a `kube-*` one, is refused:
  `ProfileRefused`), makes sure it holds what `profile_objects` lists
  (server-side apply, so a change of the chart's settings reaches every namespace at its
  user's next spawn), stores the user's tokens in a Secret there, and points the spawner at
  that namespace and its ServiceAccount;
- `modify_pod_hook(spawner, pod)` replaces every token KubeSpawner would write into the pod
  spec as a literal value with a reference to that Secret.

What a user's namespace holds (all from the chart's settings, `ProfileSettings`):
- Pod Security Admission labels (`baseline` by default, `restricted` possible): no privileged
  pod, no hostPath, no host network, whoever creates the pod (an operator included);
- the notebook server's ServiceAccount, bound (RoleBinding) to the ClusterRole with exactly
  what distrun needs there, and the gateway's ServiceAccount bound to the ClusterRole that lets
  it manage kernel pods there; nothing else is bound, so no ServiceAccount in the namespace
  has more than the user;
- a ResourceQuota and a LimitRange; where an allow-list of PriorityClasses is set, a quota of
  zero pods for every other class;
- NetworkPolicies: deny by default, then the namespace's own pods among themselves (a job's
  replicas, the notebook server and its kernels), DNS, the gateway and the hub, the API server,
  and the internet but no private address (so no other user's pod).

Runs in the hub's image: the stdlib and kubernetes_asyncio (KubeSpawner's own client) only.
"""

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gateway_tokens
from user_namespaces import user_namespace

MANAGER = "distrun-profiles"
SETTINGS_FILE = Path(
    os.environ.get("DISTRUN_PROFILE_SETTINGS", "/etc/distrun/profiles/settings.json")
)
# Tokens KubeSpawner would put in the pod spec as literal values -> the Secret key holding each.
SECRET_ENV = {
    "JUPYTERHUB_API_TOKEN": "jupyterhub-api-token",
    "JPY_API_TOKEN": "jupyterhub-api-token",
    "DISTRUN_GATEWAY_TOKEN": "distrun-gateway-token",
}


@dataclass(frozen=True)
class NetworkSettings:
    enabled: bool = True
    hub_namespace: str = "jhub"
    gateway_pod_labels: dict[str, str] = field(default_factory=dict)
    gateway_ports: tuple[int, ...] = (8888, 8877)
    hub_pod_labels: dict[str, str] = field(default_factory=lambda: {"component": "hub"})
    hub_port: int = 8081
    proxy_pod_labels: dict[str, str] = field(default_factory=lambda: {"component": "proxy"})
    notebook_pod_labels: dict[str, str] = field(
        default_factory=lambda: {"component": "singleuser-server"}
    )
    notebook_port: int = 8888
    api_server_cidrs: tuple[str, ...] = ()
    internet_egress: bool = True
    private_cidrs: tuple[str, ...] = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


@dataclass(frozen=True)
class ProfileSettings:
    notebook_cluster_role: str = ""
    # False (the chart's profiles.enabled=false): one namespace for every user; the hook only
    # signs each user's gateway token, which the server then gets as a variable.
    enabled: bool = True
    namespace_template: str = "distrun-{username}"
    notebook_service_account: str = "distrun-notebook"
    gateway_cluster_role: str = ""
    gateway_service_account: str = ""
    gateway_namespace: str = ""
    pod_security: str = "baseline"  # a Pod Security Admission level: baseline or restricted
    resource_quota: dict[str, str] = field(default_factory=dict)  # ResourceQuota spec.hard
    limit_range: list[dict[str, Any]] = field(default_factory=list)  # LimitRange spec.limits
    allowed_priority_classes: tuple[str, ...] | None = None  # None: no restriction
    tokens_secret: str = "distrun-user-tokens"
    network: NetworkSettings = field(default_factory=NetworkSettings)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProfileSettings":
        network = NetworkSettings(
            **{
                k: tuple(v) if isinstance(v, list) else v
                for k, v in data.pop("network", {}).items()
            }
        )
        allowed = data.pop("allowed_priority_classes", None)
        return cls(
            **data,
            network=network,
            allowed_priority_classes=None if allowed is None else tuple(allowed),
        )


# --- the objects of a profile ---------------------------------------------------------------


class ProfileRefused(Exception):
    """A user who cannot be given a namespace; the message says why, for the hub to show."""


OWNER_ANNOTATION = "distrun.io/owner"
PROFILE_LABEL = "distrun.io/profile"
MAX_USERNAME_CHARS = 256


def profile_namespace(settings: ProfileSettings, username: str) -> str:
    """The user's namespace; ProfileRefused for a user name no namespace can be made for, and
    for a template that would give a user the hub's, the gateway's, `default` or a `kube-*`
    namespace (with "{username}" alone, a user named kube-system)."""
    if not username or len(username) > MAX_USERNAME_CHARS or not username.isprintable():
        raise ProfileRefused(
            f"user name {username[:40]!r} is not valid for a distrun profile: use 1 to "
            f"{MAX_USERNAME_CHARS} printable characters"
        )
    template = settings.namespace_template
    if template.count("{username}") != 1:
        raise ProfileRefused(
            f"profiles.namespaceTemplate {template!r} must hold {{username}} once: every user "
            "needs a namespace of their own"
        )
    try:
        namespace = user_namespace(template, username)
    except ValueError as error:
        raise ProfileRefused(str(error)) from None
    reserved = {settings.gateway_namespace, settings.network.hub_namespace, "default"}
    if namespace in reserved or namespace.startswith("kube-"):
        raise ProfileRefused(
            f"user {username!r} would get namespace {namespace!r}, which is the cluster's or "
            "the hub's own: refused (give profiles.namespaceTemplate a prefix)"
        )
    return namespace


def profile_objects(settings: ProfileSettings, username: str) -> list[dict[str, Any]]:
    """Everything the user's namespace holds, namespace first."""
    namespace = profile_namespace(settings, username)
    objects = [
        _namespace(settings, namespace, username),
        _service_account(namespace, settings.notebook_service_account),
        _binding(namespace, "distrun-notebook", settings.notebook_cluster_role,
                 settings.notebook_service_account, namespace),
    ]  # fmt: skip
    if settings.gateway_cluster_role and settings.gateway_service_account:
        objects.append(
            _binding(namespace, "distrun-gateway-kernels", settings.gateway_cluster_role,
                     settings.gateway_service_account, settings.gateway_namespace)
        )  # fmt: skip
    if settings.resource_quota:
        objects.append(_quota(namespace, "distrun-quota", {"hard": settings.resource_quota}))
    if settings.allowed_priority_classes is not None:
        objects.append(_priority_class_quota(namespace, settings.allowed_priority_classes))
    if settings.limit_range:
        objects.append(_object("v1", "LimitRange", namespace, "distrun-limits",
                               spec={"limits": settings.limit_range}))  # fmt: skip
    if settings.network.enabled:
        objects += network_policies(settings.network, namespace)
    return objects


def _object(
    api_version: str, kind: str, namespace: str | None, name: str, **body: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGER}}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **body}


def _namespace(settings: ProfileSettings, namespace: str, username: str) -> dict[str, Any]:
    obj = _object("v1", "Namespace", None, namespace)
    level = settings.pod_security
    for mode in ("enforce", "audit", "warn"):
        obj["metadata"]["labels"][f"pod-security.kubernetes.io/{mode}"] = level
        obj["metadata"]["labels"][f"pod-security.kubernetes.io/{mode}-version"] = "latest"
    obj["metadata"]["labels"][PROFILE_LABEL] = "true"
    obj["metadata"]["annotations"] = {OWNER_ANNOTATION: username}
    return obj


def _service_account(namespace: str, name: str) -> dict[str, Any]:
    return _object("v1", "ServiceAccount", namespace, name)


def _binding(
    namespace: str, name: str, cluster_role: str, account: str, account_namespace: str
) -> dict[str, Any]:
    return _object(
        "rbac.authorization.k8s.io/v1", "RoleBinding", namespace, name,
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": cluster_role},
        subjects=[{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
    )  # fmt: skip


def _quota(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _object("v1", "ResourceQuota", namespace, name, spec=spec)


def _priority_class_quota(namespace: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """No pod that names a PriorityClass outside `allowed` (quota admission refuses it; a
    cluster's globalDefault class is written into pods that name none: allow it too)."""
    expressions: list[dict[str, Any]] = [{"scopeName": "PriorityClass", "operator": "Exists"}]
    if allowed:
        expressions.append(
            {"scopeName": "PriorityClass", "operator": "NotIn", "values": list(allowed)}
        )
    spec = {"hard": {"pods": "0"}, "scopeSelector": {"matchExpressions": expressions}}
    return _quota(namespace, "distrun-priority-classes", spec)


def network_policies(net: NetworkSettings, namespace: str) -> list[dict[str, Any]]:
    def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return _object("networking.k8s.io/v1", "NetworkPolicy", namespace, name, spec=spec)

    hub = {"kubernetes.io/metadata.name": net.hub_namespace}
    ports = lambda *numbers: [{"port": n, "protocol": "TCP"} for n in numbers]
    egress = [
        {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                        "kube-system"}},
                 "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
         "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"to": [{"namespaceSelector": {"matchLabels": hub},
                 "podSelector": {"matchLabels": net.gateway_pod_labels}}],
         "ports": ports(*net.gateway_ports)},
        {"to": [{"namespaceSelector": {"matchLabels": hub},
                 "podSelector": {"matchLabels": net.hub_pod_labels}}],
         "ports": ports(net.hub_port)},
    ]  # fmt: skip
    if net.api_server_cidrs:
        egress.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in net.api_server_cidrs]})
    if net.internet_egress:
        egress.append(
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(net.private_cidrs)}}]}
        )
    return [
        policy("distrun-default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        # The namespace's own pods: a job's replicas among themselves, kernels and the server.
        policy("distrun-same-namespace", {
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": [{"to": [{"podSelector": {}}]}],
        }),
        policy("distrun-egress", {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress}),
        # The hub's proxy reaches the notebook server; the hub checks it is up.
        policy("distrun-notebook-ingress", {
            "podSelector": {"matchLabels": net.notebook_pod_labels},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [
                {"namespaceSelector": {"matchLabels": hub},
                 "podSelector": {"matchLabels": net.proxy_pod_labels}},
                {"namespaceSelector": {"matchLabels": hub},
                 "podSelector": {"matchLabels": net.hub_pod_labels}},
            ], "ports": ports(net.notebook_port)}],
        }),
    ]  # fmt: skip


def tokens_secret(
    settings: ProfileSettings, namespace: str, tokens: dict[str, str]
) -> dict[str, Any]:
    secret = _object("v1", "Secret", namespace, settings.tokens_secret, type="Opaque")
    secret["stringData"] = tokens
    return secret


# --- applying them --------------------------------------------------------------------------

_PATHS = {
    "Namespace": "/api/v1/namespaces/{name}",
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
    "Secret": "/api/v1/namespaces/{namespace}/secrets/{name}",
    "ResourceQuota": "/api/v1/namespaces/{namespace}/resourcequotas/{name}",
    "LimitRange": "/api/v1/namespaces/{namespace}/limitranges/{name}",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{name}",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}",
}


async def apply(api_client: Any, objects: list[dict[str, Any]]) -> None:
    """Server-side apply of each object, in order, as field manager `distrun-profiles`."""
    for obj in objects:
        meta = obj["metadata"]
        path = _PATHS[obj["kind"]].format(name=meta["name"], namespace=meta.get("namespace", ""))
        await api_client.call_api(
            path,
            "PATCH",
            query_params=[("fieldManager", MANAGER), ("force", "true")],
            header_params={"Content-Type": "application/apply-patch+yaml",
                           "Accept": "application/json"},
            body=obj,
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )  # fmt: skip


async def ensure_profile(
    api_client: Any, settings: ProfileSettings, username: str, tokens: dict[str, str]
) -> str:
    """Applies the user's profile and stores their tokens; the namespace's name. The
    namespace is created for the user, or already theirs: ProfileRefused otherwise."""
    objects = profile_objects(settings, username)
    namespace = str(objects[0]["metadata"]["name"])
    await claim_namespace(api_client, objects[0], username)
    await apply(api_client, [*objects, tokens_secret(settings, namespace, tokens)])
    return namespace


async def claim_namespace(api_client: Any, namespace: dict[str, Any], username: str) -> None:
    """Creates the user's namespace, or finds it made by this hook for this user. Any other
    namespace of that name (made by someone else, for someone else) is never adopted."""
    from kubernetes_asyncio.client.exceptions import ApiException

    name = namespace["metadata"]["name"]
    try:
        await _call(api_client, "/api/v1/namespaces", "POST", body=namespace)
        return
    except ApiException as error:
        if error.status != 409:
            raise
    existing = await _call(api_client, f"/api/v1/namespaces/{name}", "GET")
    if not owned_by(existing, username):
        raise ProfileRefused(
            f"namespace {name!r} already exists and is not {username!r}'s distrun profile: "
            "refused (an administrator can delete or rename it)"
        )


def owned_by(namespace: Any, username: str) -> bool:
    """Whether a namespace as the API server returns it is `username`'s profile (only the hub
    and cluster administrators may label and annotate namespaces)."""
    meta = namespace.get("metadata") if isinstance(namespace, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return (
        labels.get(PROFILE_LABEL) == "true"
        and labels.get("app.kubernetes.io/managed-by") == MANAGER
        and annotations.get(OWNER_ANNOTATION) == username
    )


async def _call(api_client: Any, path: str, method: str, body: Any = None) -> Any:
    return await api_client.call_api(
        path,
        method,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        response_types_map={200: "object", 201: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )


# --- the JupyterHub hooks -------------------------------------------------------------------

_settings: ProfileSettings | None = None


def settings() -> ProfileSettings:
    global _settings
    if _settings is None:
        _settings = ProfileSettings.from_json(json.loads(SETTINGS_FILE.read_text()))
    return _settings


def user_tokens(username: str, hub_token: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The tokens stored in the user's Secret: the hub's API token for their server and, when
    the hub holds the gateway's key, a new gateway token (`DISTRUN_GATEWAY_TOKEN_SECONDS` long,
    0: until revoked) signed at each spawn."""
    tokens = {"jupyterhub-api-token": hub_token}
    key = environ.get("DISTRUN_GATEWAY_USER_KEY")
    if key:
        lifetime = int(environ.get("DISTRUN_GATEWAY_TOKEN_SECONDS", "0"))
        tokens["distrun-gateway-token"] = gateway_tokens.sign(key.encode(), username, lifetime)
    return tokens


async def pre_spawn_hook(spawner: Any) -> None:
    profile = settings()
    username = spawner.user.name
    tokens = user_tokens(username, spawner.api_token, os.environ)
    if not profile.enabled:
        if "distrun-gateway-token" in tokens:  # a new dict: the configured one is shared
            token = tokens["distrun-gateway-token"]
            spawner.environment = {**spawner.environment, "DISTRUN_GATEWAY_TOKEN": token}
        return
    from kubernetes_asyncio import client, config

    config.load_incluster_config()
    async with client.ApiClient() as api_client:
        namespace = await ensure_profile(api_client, profile, username, tokens)
    spawner.namespace = namespace
    spawner.service_account = profile.notebook_service_account
    spawner.log.info("distrun profile %s ready for %s", namespace, username)


def modify_pod_hook(spawner: Any, pod: Any) -> Any:
    """Every token variable of the pod's containers comes from the user's Secret, by reference,
    never as a literal value of the pod spec."""
    from kubernetes_asyncio.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

    if not settings().enabled:
        return pod  # no namespace of the user's own to hold a Secret
    secret = settings().tokens_secret
    for container in pod.spec.containers:
        env = [v for v in container.env or [] if v.name not in SECRET_ENV]
        for name, key in SECRET_ENV.items():
            selector = V1SecretKeySelector(name=secret, key=key, optional=True)
            env.append(V1EnvVar(name=name, value_from=V1EnvVarSource(secret_key_ref=selector)))
        container.env = env
    return pod
