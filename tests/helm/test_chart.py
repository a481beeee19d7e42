"""The chart: lint, rendered objects, and (with a real kube-apiserver) dry runs and RBAC."""

import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helm_binary import ensure_helm

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "distrun"
GATEWAY_CONFIG = REPO / "gateway_config"
# A helm built by `go install` lacks the release ldflags and assumes Kubernetes 1.20.
KUBE_VERSION = ("--kube-version", "1.33.0")


@pytest.fixture(scope="session")
def helm() -> Path:
    return ensure_helm()


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], check=False, capture_output=True, text=True, timeout=120
    )


def render(helm: Path, *args: str, namespace: str = "jhub") -> list[dict[str, Any]]:
    result = run_helm(
        helm, "template", "distrun", str(CHART), "--namespace", namespace, *KUBE_VERSION, *args
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name}"
    return found[0]


def test_helm_lint_passes_for_default_and_per_user_values(helm: Path) -> None:
    for extra in ([], ["--set", "kernels.namespacePolicy=per-user"]):
        result = run_helm(helm, "lint", "--strict", str(CHART), *extra)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_gateway_runs_two_replicas_behind_the_front_with_kernels_from_configmaps(
    helm: Path,
) -> None:
    objects = render(helm)
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    gateway, front = pod["containers"]
    assert gateway["command"][:3] == ["python", "-m", "distrun_gateway"]
    assert front["command"] == ["python", "/etc/distrun/gateway/identity_front.py"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    env = {e["name"]: e for e in gateway["env"]}
    assert env["EG_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "eg-token"
    front_env = {e["name"]: e for e in front["env"]}
    assert front_env["DISTRUN_FRONT_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "user-key"
    # Each user's kernels run in that user's namespace, named as the hub names it.
    assert front_env["DISTRUN_FRONT_KERNEL_NAMESPACE"]["value"] == "distrun-{username}"
    assert env["DISTRUN_KERNEL_TOKEN_SECRET"]["value"] == "distrun-user-tokens"

    # The ConfigMaps carry gateway_config/ byte for byte: one source, no copies.
    config = one(objects, "ConfigMap", "distrun-distrun-gateway")["data"]
    names = ("distrun_gateway.py", "identity_front.py", "enterprise_gateway_config.py")
    for name in (*names, "user_namespaces.py"):
        assert config[name] == (GATEWAY_CONFIG / "gateway" / name).read_text().rstrip("\n")
    profiles = one(objects, "ConfigMap", "distrun-distrun-profiles")["data"]
    hook = GATEWAY_CONFIG / "profiles" / "distrun_profiles.py"
    assert profiles["distrun_profiles.py"] == hook.read_text().rstrip("\n")
    specs = one(objects, "ConfigMap", "distrun-distrun-kernelspecs")["data"]
    for name in ("python_distrun", "python_distrun_gpu"):
        spec = json.loads(specs[f"{name}.kernel.json"])
        assert spec["argv"][1] == "/etc/distrun/kernel-pod/launch_kernel_pod.py"
        assert spec["metadata"]["process_proxy"]["class_name"].endswith("KubernetesProcessProxy")

    service = one(objects, "Service")
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert one(objects, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]
    test_pod = one(objects, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"


def test_only_notebook_servers_reach_the_front_and_only_kernels_the_response_port(
    helm: Path,
) -> None:
    policy = one(render(helm), "NetworkPolicy")["spec"]
    front_rule, response_rule = policy["ingress"]
    assert front_rule["ports"] == [{"port": 8888, "protocol": "TCP"}]
    notebooks = front_rule["from"][0]
    assert notebooks["podSelector"]["matchLabels"] == {"component": "singleuser-server"}
    assert notebooks["namespaceSelector"]["matchLabels"] == {"distrun.io/profile": "true"}
    legacy = one(render(helm, "--set", "profiles.enabled=false"), "NetworkPolicy")["spec"][
        "ingress"
    ][0]
    assert legacy["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "jhub"
    }
    assert response_rule["ports"] == [{"port": 8877, "protocol": "TCP"}]
    assert response_rule["from"][0]["podSelector"]["matchLabels"]["component"] == "kernel"


def test_singleuser_rbac_covers_jobs_configmaps_pods_logs_events_and_nothing_else(
    helm: Path,
) -> None:
    objects = render(
        helm, "--set", "singleuser.jobNamespaces={team-a,team-b}", "--set", "profiles.enabled=false"
    )
    roles = [
        r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("singleuser-jobs")
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    granted = {
        (group, resource, verb)
        for rule in roles[0]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("kubeflow.org", "pytorchjobs", "create") in granted
    assert ("batch.volcano.sh", "jobs", "delete") in granted
    assert ("", "pods/log", "get") in granted
    assert ("metrics.k8s.io", "pods", "list") in granted  # usage, where metrics-server runs
    assert ("", "pods", "create") not in granted
    assert not any(resource in ("secrets", "roles", "rolebindings") for _, resource, _ in granted)
    assert "*" not in {verb for _, _, verb in granted}
    assert not [r for r in by_kind(objects, "ClusterRole") if "singleuser" in r["metadata"]["name"]]


READER = "-training-runtime-reader"


def runtime_readers(objects: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Who the chart lets read ClusterTrainingRuntimes (get, nothing else), or None."""
    roles = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith(READER)]
    bindings = [
        b for b in by_kind(objects, "ClusterRoleBinding") if b["metadata"]["name"].endswith(READER)
    ]
    if not roles and not bindings:
        return None
    [role], [binding] = roles, bindings
    assert role["rules"] == [
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"],
         "verbs": ["get"]}
    ]  # fmt: skip
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    subjects: list[dict[str, Any]] = binding["subjects"]
    return subjects


def test_reading_cluster_training_runtimes_is_granted_narrowly_or_only_when_asked(
    helm: Path,
) -> None:
    """A Trainer whole-job restart copies the configured ClusterTrainingRuntime: without
    profiles the singleuser ServiceAccount may read them; with profiles nobody by default, every
    ServiceAccount only when the administrator says so."""
    shared = render(helm, "--set", "profiles.enabled=false")
    assert runtime_readers(shared) == [
        {"kind": "ServiceAccount", "name": "distrun-singleuser", "namespace": "jhub"}
    ]
    assert runtime_readers(render(helm)) is None
    asked = render(helm, "--set", "trainer.readClusterRuntimes=true")
    assert runtime_readers(asked) == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts"}
    ]


def test_per_user_namespaces_get_a_cluster_wide_pod_role_and_a_template_for_the_front(
    helm: Path,
) -> None:
    objects = render(
        helm, "--set", "kernels.namespacePolicy=per-user", "--set", "profiles.enabled=false"
    )
    [pods_role] = [
        r for r in by_kind(objects, "ClusterRole") if not r["metadata"]["name"].endswith(READER)
    ]
    assert pods_role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"],
         "verbs": ["create", "get", "list", "watch", "delete"]}
    ]  # fmt: skip
    front = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][1]
    env = {e["name"]: e.get("value") for e in front["env"]}
    assert env["DISTRUN_FRONT_KERNEL_NAMESPACE"] == "jupyter-{username}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "gateway.replicas=0"], "/gateway/replicas"),
        (["--set", "kernels.namespacePolicy=everyone"], "namespacePolicy"),
        (["--set", "kernels.uid=0"], "/kernels/uid"),
        (["--set", "gateway.unknown=1"], "unknown"),
        (["--set", "prerequisites.requireEngines={volcano}"], "batch.volcano.sh/v1alpha1/Job"),
        (["--set", "profiles.allowedVolumeTypes={configMap,nfs2}"], "allowedVolumeTypes"),
        (["--set", "profiles.allowedVolumeTypes={}"], "allowedVolumeTypes"),
    ],
)
def test_bad_values_are_refused_with_a_message_naming_them(
    helm: Path, args: list[str], message: str
) -> None:
    result = run_helm(helm, "template", "distrun", str(CHART), *KUBE_VERSION, *args)
    assert result.returncode != 0
    assert message in result.stderr


def test_the_prerequisites_check_passes_when_the_cluster_serves_the_engines(helm: Path) -> None:
    objects = render(
        helm,
        "--set", "prerequisites.requireEngines={kubeflow,volcano}",
        "--api-versions", "kubeflow.org/v1/PyTorchJob",
        "--api-versions", "batch.volcano.sh/v1alpha1/Job",
    )  # fmt: skip
    assert one(objects, "Deployment")


def test_jupyterhub_values_point_servers_at_the_gateway_with_their_own_token() -> None:
    values = yaml.safe_load((REPO / "helm" / "jupyterhub-values.yaml").read_text())
    env = values["singleuser"]["extraEnv"]
    assert env["DISTRUN_GATEWAY_URL"].startswith("http://distrun-distrun-gateway.")
    assert env["DISTRUN_POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["DISTRUN_JOB_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.namespace"
    )
    assert values["singleuser"]["serviceAccountName"] == "distrun-notebook"
    key_ref = values["hub"]["extraEnv"]["DISTRUN_GATEWAY_USER_KEY"]["valueFrom"]["secretKeyRef"]
    assert key_ref == {"name": "distrun-distrun-gateway", "key": "user-key"}
    volume = values["hub"]["extraVolumes"][0]["configMap"]["name"]
    assert volume == "distrun-distrun-profiles"
    assert "distrun_profiles.pre_spawn_hook" in values["hub"]["extraConfig"]["distrun-profiles"]
    assert "DISTRUN_GATEWAY_TOKEN" not in env  # never one shared token in the pod spec


def test_profiles_give_users_cluster_roles_to_be_bound_in_their_namespace_only(
    helm: Path,
) -> None:
    objects = render(helm)
    assert not by_kind(objects, "Role") and not by_kind(objects, "RoleBinding")
    roles = {r["metadata"]["name"]: r for r in by_kind(objects, "ClusterRole")}
    notebook = roles["distrun-distrun-jhub-notebook"]
    granted = {
        (group, resource, verb)
        for rule in notebook["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("kubeflow.org", "pytorchjobs", "create") in granted
    assert not {r for _, r, _ in granted} & {"secrets", "roles", "rolebindings", "pods/exec"}
    assert ("", "pods", "create") not in granted
    # The hub binds exactly the notebook and gateway roles; nobody binds them cluster-wide.
    hub = roles["distrun-distrun-jhub-hub-profiles"]
    [bind] = [rule for rule in hub["rules"] if rule["verbs"] == ["bind"]]
    assert sorted(bind["resourceNames"]) == [
        "distrun-distrun-jhub-gateway-kernels",
        "distrun-distrun-jhub-notebook",
    ]
    [binding] = by_kind(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "distrun-distrun-jhub-hub-profiles"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}]


def test_by_default_no_priority_class_and_no_link_local_or_private_address_is_open(
    helm: Path,
) -> None:
    """The chart's defaults, as the hub's hook turns them into each user's objects: a pod
    naming any PriorityClass is over a zero-pod quota (the cluster's globalDefault one, found
    at install, is added; `helm template` finds none), and egress to the internet excepts the
    private, link-local (instance metadata) and shared ranges; no IPv6 egress at all."""
    [configmap] = [
        o for o in by_kind(render(helm), "ConfigMap") if o["metadata"]["name"].endswith("-profiles")
    ]
    settings = json.loads(configmap["data"]["settings.json"])
    assert settings["allowed_priority_classes"] == []
    sys.path[:0] = [str(CHART / "files" / "gateway"), str(CHART / "files" / "profiles")]
    try:
        import distrun_profiles
    finally:
        sys.path[:2] = []
    objects = distrun_profiles.profile_objects(
        distrun_profiles.ProfileSettings.from_json(settings), "alice"
    )
    [quota] = [o for o in objects if o["metadata"]["name"] == "distrun-priority-classes"]
    assert quota["spec"] == {
        "hard": {"pods": "0"},
        "scopeSelector": {
            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]
        },
    }
    [egress] = [o for o in objects if o["metadata"]["name"] == "distrun-egress"]
    blocks = [
        p["ipBlock"] for rule in egress["spec"]["egress"] for p in rule["to"] if "ipBlock" in p
    ]
    assert blocks == [{"cidr": "0.0.0.0/0", "except": [
        "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"]}]  # fmt: skip
    metadata = ipaddress.ip_address("169.254.169.254")
    assert any(metadata in ipaddress.ip_network(cidr) for cidr in blocks[0]["except"])


def test_users_pods_mount_only_restricted_volume_types_unless_the_values_say_otherwise(
    helm: Path,
) -> None:
    """The volume policy's expression names exactly the allowed types (the tier's
    test_multi_user.py has the API server judge it); null installs none; the MPIJob launcher
    policy is there either way; neither is installed without profiles."""

    def policies(*args: str) -> dict[str, dict[str, Any]]:
        objects = by_kind(render(helm, *args), "ValidatingAdmissionPolicy")
        return {o["metadata"]["name"]: o for o in objects}

    default = policies()
    [volumes] = [o for name, o in default.items() if name.endswith("-user-volumes")]
    [expression] = [v["expression"] for v in volumes["spec"]["validations"]]
    restricted = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                  "persistentVolumeClaim", "projected", "secret")  # fmt: skip
    assert sorted(re.findall(r"has\(v\.(\w+)\)", expression)) == sorted(restricted)
    assert any(name.endswith("-mpi-launcher-account") for name in default)
    opened = policies("--set", "profiles.allowedVolumeTypes=null")
    assert [name for name in opened if name.endswith("-user-volumes")] == []
    assert any(name.endswith("-mpi-launcher-account") for name in opened)
    assert policies("--set", "profiles.enabled=false") == {}


def test_null_opens_every_priority_class_as_the_values_file_says(helm: Path) -> None:
    """Helm drops a key set to null: the schema must not require it back."""
    [configmap] = [
        o
        for o in by_kind(render(helm, "--set", "profiles.allowedPriorityClasses=null"), "ConfigMap")
        if o["metadata"]["name"].endswith("-profiles")
    ]
    assert json.loads(configmap["data"]["settings.json"])["allowed_priority_classes"] is None
