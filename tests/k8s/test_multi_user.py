"""One user against another, with exactly the credentials the deployment hands out.

The distrun chart is rendered with its default values, nothing set, and applied to the tier's
real API server; the hub's profile hook, taken from the chart's own ConfigMap, provisions alice and
bob as it does at their spawn, acting as the hub's ServiceAccount with the chart's rights. Then
alice, holding what her notebook pod holds (her namespace's distrun-notebook token), tries
every attack the issue lists against bob. Each attempt and its answer is printed; each must be
refused. Network reachability is judged from the NetworkPolicy objects (netpol.py): the tier
has no network plugin to enforce them.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, Self

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from distrun.engines.kube.manifests.common import job_labels

from ..helm.test_chart import helm, render  # noqa: F401  (the helm fixture)
from ..helm.test_chart_cluster import until_bound
from .cluster import KubeCluster
from .controllers import training_operator_for
from .distrun_server import DistrunServer, running, submit_cell
from .netpol import Endpoint, Policies
from .real_operator import WAIT, operator_pods, succeed

pytestmark = pytest.mark.kubernetes

TEMPLATE = "distrun-{username}"  # the chart's default
# Hub user names of this run (the tier's other modules use `distrun-alice`).
USERNAMES = {user: f"{user}-{secrets.token_hex(2)}" for user in ("alice", "bob")}
SECRET_TOKENS = {name: f"{name}-hub-token-{secrets.token_hex(6)}" for name in USERNAMES.values()}
PYTORCHJOBS = ("kubeflow.org", "v1", "pytorchjobs")


class Attempts:
    """Every attack tried and what the API server answered."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, str]] = []

    def refused(
        self, what: str, call: Callable[[], Any], statuses: tuple[int, ...] = (403,)
    ) -> str:
        try:
            call()
        except ApiException as error:
            answer = f"{error.status} {error.reason}: {_message(error)}"
            self.answers.append((what, answer))
            assert error.status in statuses, f"{what}: {answer}"
            return answer
        self.answers.append((what, "ALLOWED"))
        raise AssertionError(f"{what}: allowed")

    def report(self) -> str:
        return "\n".join(f"  {what:70} -> {answer[:110]}" for what, answer in self.answers)


def _message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body).get("message", ""))
    except (TypeError, ValueError):
        return str(error.body)[:200]


def kubectl(cluster: KubeCluster, *args: str, stdin: str) -> None:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={cluster.kubeconfig('admin')}", *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def client_of(kubeconfig: Path) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(kubeconfig))


class Deployment:
    """The chart applied, the hub's hook loaded from it, alice and bob provisioned."""

    def __init__(self, cluster: KubeCluster, helm_binary: Path, workdir: Path) -> None:
        self.cluster = cluster
        self.hub_namespace = f"jhub-{secrets.token_hex(3)}"
        cluster.create_namespace(self.hub_namespace)
        objects = render(helm_binary, namespace=self.hub_namespace)
        applied = [o for o in objects if o["kind"] not in ("Pod", "PersistentVolumeClaim")]
        kubectl(cluster, "apply", "-n", self.hub_namespace, "-f", "-",
                stdin=yaml.safe_dump_all(applied))  # fmt: skip
        self.objects = objects
        core = kubernetes.client.CoreV1Api(cluster.admin)
        core.create_namespaced_service_account(self.hub_namespace, {"metadata": {"name": "hub"}})
        self.hook = self._load_hook(workdir)
        self.settings = self.hook.ProfileSettings.from_json(
            json.loads(self._profile_files()["settings.json"])
        )
        self.namespaces = {user: self._provision(name) for user, name in USERNAMES.items()}
        for namespace in self.namespaces.values():  # the authorizer sees new bindings late
            account = f"system:serviceaccount:{namespace}:distrun-notebook"
            until_bound(cluster, account, namespace, ("create", "kubeflow.org", "pytorchjobs", ""))

    def _profile_files(self) -> dict[str, str]:
        [configmap] = [
            o for o in self.objects
            if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-profiles")
        ]  # fmt: skip
        return dict(configmap["data"])

    def _load_hook(self, workdir: Path) -> Any:
        """distrun_profiles as the hub imports it: from the chart's ConfigMap."""
        for name, text in self._profile_files().items():
            (workdir / name).write_text(text)
        sys.path.insert(0, str(workdir))
        try:
            sys.modules.pop("distrun_profiles", None)
            sys.modules.pop("user_namespaces", None)
            return importlib.import_module("distrun_profiles")
        finally:
            sys.path.remove(str(workdir))

    def _provision(self, user: str) -> str:
        """What pre_spawn_hook does at the user's spawn, as the hub's ServiceAccount."""
        from kubernetes_asyncio import client as async_client
        from kubernetes_asyncio import config as async_config

        kubeconfig = self.cluster.service_account_kubeconfig(self.hub_namespace, "hub")

        async def provision() -> str:
            api = await async_config.new_client_from_config(config_file=str(kubeconfig))
            async with api:
                assert isinstance(api, async_client.ApiClient)
                tokens = {"jupyterhub-api-token": SECRET_TOKENS.get(user, "t")}
                return str(await self.hook.ensure_profile(api, self.settings, user, tokens))

        return asyncio.run(provision())

    def notebook_client(self, user: str) -> kubernetes.client.ApiClient:
        """Exactly what the user's notebook pod holds: its ServiceAccount's token."""
        namespace = self.namespaces[user]
        return client_of(self.cluster.service_account_kubeconfig(namespace, "distrun-notebook"))

    def close(self) -> None:
        for namespace in (*self.namespaces.values(), self.hub_namespace):
            self.cluster.delete_namespace(namespace)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@pytest.fixture(scope="module")
def deployment(
    kube_cluster: KubeCluster,
    helm: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    with Deployment(kube_cluster, helm, tmp_path_factory.mktemp("profiles")) as deployed:
        yield deployed


def pod(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "python:3.12", **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container], **spec}}  # fmt: skip


def pytorchjob(
    name: str, owner: str, spec_annotation: str, pod_spec: dict[str, Any]
) -> dict[str, Any]:
    """A PyTorchJob of `pod_spec`'s pods, its first container named "pytorch" as the Training
    Operator's validating webhook requires (it applies cluster-wide once the tier's operator
    runs)."""
    first, *others = pod_spec["containers"]
    pod_spec = {**pod_spec, "containers": [{**first, "name": "pytorch"}, *others]}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "labels": job_labels(name, owner),  # exactly as distrun labels its own
            "annotations": {"distrun.io/owner": owner, "distrun.io/spec": spec_annotation},
        },
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": pod_spec}}}
        },
    }


def test_alice_with_her_notebooks_credentials_reaches_nothing_of_bobs(
    deployment: Deployment, kube_cluster: KubeCluster
) -> None:
    alice_ns, bob_ns, hub_ns = (
        deployment.namespaces["alice"],
        deployment.namespaces["bob"],
        deployment.hub_namespace,
    )
    admin_core = kubernetes.client.CoreV1Api(kube_cluster.admin)
    # Bob's notebook pod, as KubeSpawner makes it through the profile hook.
    from kubernetes_asyncio.client import V1Container, V1EnvVar, V1Pod, V1PodSpec

    spawned = V1Pod(spec=V1PodSpec(containers=[V1Container(name="notebook", image="jupyter", env=[
        V1EnvVar(name="JUPYTERHUB_API_TOKEN", value=SECRET_TOKENS[USERNAMES["bob"]])])]))  # fmt: skip
    deployment.hook._settings = deployment.settings
    spec = deployment.hook.modify_pod_hook(None, spawned).to_dict()["spec"]
    bob_pod = pod("jupyter-bob", container={
        "env": [{"name": e["name"], "valueFrom": {"secretKeyRef": e["value_from"]["secret_key_ref"]}}
                for e in spec["containers"][0]["env"]]})  # fmt: skip
    bob_pod["metadata"]["labels"] = {"component": "singleuser-server"}
    admin_core.create_namespaced_pod(bob_ns, bob_pod)
    stored = admin_core.read_namespaced_pod("jupyter-bob", bob_ns).to_dict()
    assert SECRET_TOKENS[USERNAMES["bob"]] not in json.dumps(stored, default=str), (
        "a token in a pod spec"
    )

    alice = deployment.notebook_client("alice")
    core = kubernetes.client.CoreV1Api(alice)
    custom = kubernetes.client.CustomObjectsApi(alice)
    rbac = kubernetes.client.RbacAuthorizationV1Api(alice)
    attempts = Attempts()
    gateway_configmap = "distrun-distrun-kernelspecs"

    attempts.refused("list bob's pods", lambda: core.list_namespaced_pod(bob_ns))
    attempts.refused(
        "read bob's notebook pod", lambda: core.read_namespaced_pod("jupyter-bob", bob_ns)
    )
    attempts.refused("read bob's token Secret", lambda: core.read_namespaced_secret(
        "distrun-user-tokens", bob_ns))  # fmt: skip
    attempts.refused("read her own token Secret by API", lambda: core.read_namespaced_secret(
        "distrun-user-tokens", alice_ns))  # fmt: skip
    attempts.refused("list Secrets in the hub namespace",
                     lambda: core.list_namespaced_secret(hub_ns))  # fmt: skip
    attempts.refused("patch the gateway's kernelspec ConfigMap", lambda: core.patch_namespaced_config_map(
        gateway_configmap, hub_ns, {"data": {"launch_kernel_pod.py": "import os; os.system('x')"}}))  # fmt: skip
    attempts.refused("read the gateway's kernelspec ConfigMap",
                     lambda: core.read_namespaced_config_map(gateway_configmap, hub_ns))  # fmt: skip
    attempts.refused("create a job in bob's namespace", lambda: custom.create_namespaced_custom_object(
        *PYTORCHJOBS[:2], bob_ns, PYTORCHJOBS[2], pytorchjob("x", "bob", "{}", pod("m")["spec"])))  # fmt: skip
    attempts.refused("list bob's jobs", lambda: custom.list_namespaced_custom_object(
        *PYTORCHJOBS[:2], bob_ns, PYTORCHJOBS[2]))  # fmt: skip
    attempts.refused("delete bob's jobs", lambda: custom.delete_collection_namespaced_custom_object(
        *PYTORCHJOBS[:2], bob_ns, PYTORCHJOBS[2]))  # fmt: skip
    attempts.refused("read bob's code ConfigMaps", lambda: core.list_namespaced_config_map(bob_ns))
    attempts.refused("create a pod in her own namespace", lambda: core.create_namespaced_pod(
        alice_ns, pod("direct")))  # fmt: skip
    attempts.refused("exec into a pod of her own namespace", lambda: core.connect_get_namespaced_pod_exec(
        "anything", alice_ns, command=["id"], stdout=True), statuses=(403, 400))  # fmt: skip
    attempts.refused("bind herself a Role", lambda: rbac.create_namespaced_role_binding(alice_ns, {
        "metadata": {"name": "mine"}, "subjects": [{"kind": "ServiceAccount", "name": "distrun-notebook",
        "namespace": alice_ns}], "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
        "name": "cluster-admin"}}))  # fmt: skip
    attempts.refused(
        "create a namespace", lambda: core.create_namespace({"metadata": {"name": "alice2"}})
    )

    # No ServiceAccount of her namespace has more than she has: she can name any of them in a
    # job's pod template, so each must be as powerless as hers.
    for account in admin_core.list_namespaced_service_account(alice_ns).items:
        user = f"system:serviceaccount:{alice_ns}:{account.metadata.name}"
        for verb, resource in (("create", "pods"), ("get", "secrets"), ("create", "rolebindings")):
            group = "rbac.authorization.k8s.io" if resource == "rolebindings" else ""
            assert not _can(kube_cluster, user, alice_ns, verb, group, resource), (user, verb)

    # A job whose pods would be privileged, mount the host or use its network: the operator
    # creates its pods, and Pod Security Admission refuses them whoever creates them (a dry
    # run as the cluster's admin stands for the operator). The API server allows privileged
    # containers (--allow-privileged=true, as kubeadm sets it), so the refusal is PSA's alone:
    # the same pods pass a dry run in a namespace without the chart's Pod Security labels.
    unlabelled = "psa-control"
    kube_cluster.create_namespace(unlabelled)
    for what, bad, check in [
        ("privileged", pod("p", container={"securityContext": {"privileged": True}}),
         "privileged ("),
        ("hostPath", pod("h", volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
         "hostPath volumes"),
        ("hostNetwork", pod("n", hostNetwork=True),
         "host namespaces"),
        ("hostPID", pod("i", hostPID=True),
         "host namespaces"),
        ("NET_ADMIN", pod("c", container={"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}),
         "non-default capabilities"),
    ]:  # fmt: skip
        admin_core.create_namespaced_pod(unlabelled, bad, dry_run="All")  # the API server's yes
        custom.create_namespaced_custom_object(
            *PYTORCHJOBS[:2], alice_ns, PYTORCHJOBS[2],
            pytorchjob(f"evil-{what.lower().replace('_', '-')}", "alice", "{}", bad["spec"]))  # fmt: skip
        answer = attempts.refused(f"the operator creates a {what} pod for her job", lambda bad=bad:
            admin_core.create_namespaced_pod(alice_ns, bad, dry_run="All"), statuses=(403, 422))  # fmt: skip
        assert "violates PodSecurity" in answer and check in answer, answer
    admin_core.create_namespaced_pod(alice_ns, pod("fine"), dry_run="All")  # the control

    # The chart's default allow-list of PriorityClasses is empty (but for the cluster's
    # globalDefault, which this cluster has not): no pod of hers may name one (quota
    # admission), system-node-critical (which preempts anyone's) included.
    answer = attempts.refused("a pod of hers with system-node-critical", lambda:
        admin_core.create_namespaced_pod(alice_ns, pod("crit", priorityClassName=
            "system-node-critical"), dry_run="All"))  # fmt: skip
    assert "exceeded quota: distrun-priority-classes" in answer
    admin_core.create_namespaced_pod(alice_ns, pod("none"), dry_run="All")  # no class named

    # Volumes: only the types of profiles.allowedVolumeTypes, whoever creates the pod (a
    # ValidatingAdmissionPolicy): an inline nfs, cephfs or iscsi volume would mount any export
    # her pods reach, the gateway's shared volume among them.
    _wait_for_the_volume_policy(admin_core, alice_ns)
    for what, source in [
        ("nfs", {"nfs": {"server": "10.0.0.9", "path": "/exports/gateway"}}),
        ("cephfs", {"cephfs": {"monitors": ["10.0.0.9:6789"]}}),
        ("iscsi", {"iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.2001-04.com.x:t", "lun": 0}}),
        ("gitRepo", {"gitRepo": {"repository": "https://example.com/x.git"}}),
    ]:  # fmt: skip
        bad = pod(f"v-{what.lower()}", volumes=[{"name": "data", **source}])
        answer = attempts.refused(f"the operator creates a pod with an inline {what} volume",
            lambda bad=bad: admin_core.create_namespaced_pod(alice_ns, bad, dry_run="All"),
            statuses=(403, 422))  # fmt: skip
        assert "may mount only these volume types" in answer and "not data" in answer, answer
    # What distrun's replicas, kernels and notebook servers mount, and her own claims.
    allowed = [{"name": "code", "configMap": {"name": "c"}}, {"name": "scratch", "emptyDir": {}},
               {"name": "home", "persistentVolumeClaim": {"claimName": "home"}},
               {"name": "info", "downwardAPI": {"items": []}},
               {"name": "token", "projected": {"sources": []}}]  # fmt: skip
    admin_core.create_namespaced_pod(alice_ns, pod("fine-volumes", volumes=allowed), dry_run="All")

    # An MPIJob's launcher naming her notebook's ServiceAccount would have the operator bind
    # it pods/exec on the job's workers: only the launcher's own account may be named.
    mpijobs = ("kubeflow.org", "v1", alice_ns, "mpijobs")
    answer = attempts.refused("an MPIJob whose launcher runs as her notebook's account", lambda:
        custom.create_namespaced_custom_object(*mpijobs, mpijob("exec", "distrun-notebook")),
        statuses=(403, 422))  # fmt: skip
    assert "runs as its own ServiceAccount (exec-launcher" in answer, answer
    custom.create_namespaced_custom_object(*mpijobs, mpijob("own", "own-launcher"), dry_run="All")
    custom.create_namespaced_custom_object(*mpijobs, mpijob("plain", None), dry_run="All")

    # The gateway manages kernel pods in users' namespaces and nothing else.
    gateway = f"system:serviceaccount:{hub_ns}:distrun-distrun-gateway"
    for namespace in (alice_ns, bob_ns):
        assert _can(kube_cluster, gateway, namespace, "create", "", "pods")
        assert not _can(kube_cluster, gateway, namespace, "get", "", "secrets")
    assert not _can(kube_cluster, gateway, "default", "create", "", "pods")
    print(f"\nattacks by alice ({alice_ns}) on bob ({bob_ns}):\n{attempts.report()}")


def _wait_for_the_volume_policy(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    """The API server applies a new admission policy within seconds of its creation."""
    probe = pod("probe", volumes=[{"name": "data", "nfs": {"server": "10.0.0.9", "path": "/"}}])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            core.create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException:
            return
        time.sleep(0.5)
    raise AssertionError("the chart's volume policy never applied to the user's namespace")


def mpijob(name: str, account: str | None) -> dict[str, Any]:
    launcher = pod("l", **({"serviceAccountName": account} if account else {}))["spec"]
    launcher["containers"][0]["name"] = "mpi"
    worker = pod("w")["spec"]
    return {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": name},
            "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": launcher}},
                                         "Worker": {"replicas": 1, "template": {"spec": worker}}}}}  # fmt: skip


def _can(
    cluster: KubeCluster, user: str, namespace: str, verb: str, group: str, resource: str
) -> bool:
    account_namespace = user.split(":")[2]
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}"],
        "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": resource}}}  # fmt: skip
    api = kubernetes.client.AuthorizationV1Api(cluster.admin)
    return bool(api.create_subject_access_review(review).status.allowed)


def test_no_pod_of_alices_reaches_bobs_and_her_own_reach_what_they_need(
    deployment: Deployment, kube_cluster: KubeCluster
) -> None:
    alice_ns, bob_ns, hub_ns = (
        deployment.namespaces["alice"],
        deployment.namespaces["bob"],
        deployment.hub_namespace,
    )
    networking = kubernetes.client.NetworkingV1Api(kube_cluster.admin)
    core = kubernetes.client.CoreV1Api(kube_cluster.admin)
    policies = [
        kube_cluster.admin.sanitize_for_serialization(p)
        for namespace in (alice_ns, bob_ns, hub_ns)
        for p in networking.list_namespaced_network_policy(namespace).items
    ]
    labels = {
        ns.metadata.name: ns.metadata.labels or {}
        for ns in core.list_namespace().items
        if ns.metadata.name in (alice_ns, bob_ns, hub_ns)
    }
    net = Policies(policies, labels)
    job = {"training.kubeflow.org/job-name": "train"}
    alice_master = Endpoint(
        "10.1.0.1", alice_ns, {**job, "training.kubeflow.org/replica-type": "master"}
    )
    alice_worker = Endpoint(
        "10.1.0.2", alice_ns, {**job, "training.kubeflow.org/replica-type": "worker"}
    )
    alice_notebook = Endpoint("10.1.0.3", alice_ns, {"component": "singleuser-server"})
    bob_worker = Endpoint("10.2.0.2", bob_ns, job)
    gateway = Endpoint("10.3.0.1", hub_ns, {"app.kubernetes.io/name": "distrun", "app.kubernetes.io/instance":
                       "distrun", "app.kubernetes.io/component": "gateway"})  # fmt: skip
    hub = Endpoint("10.3.0.2", hub_ns, {"component": "hub"})
    proxy = Endpoint("10.3.0.3", hub_ns, {"component": "proxy"})
    internet, elsewhere = Endpoint("8.8.8.8"), Endpoint("10.9.9.9")
    expected = [
        (alice_master, alice_worker, 29500, True),  # a job's replicas rendezvous
        (alice_worker, alice_master, 29500, True),
        (alice_notebook, gateway, 8888, True),  # the notebook server reaches the front
        (alice_notebook, hub, 8081, True),
        (proxy, alice_notebook, 8888, True),  # the hub's proxy reaches the notebook server
        (alice_master, internet, 443, True),  # datasets and packages
        (alice_master, bob_worker, 29500, False),  # another user's rendezvous port
        (bob_worker, alice_master, 29500, False),
        (alice_notebook, bob_worker, 29500, False),
        (alice_master, gateway, 8888, False),  # only notebook servers reach the front
        (alice_master, elsewhere, 6443, False),  # no private address but the API server's
        (alice_master, Endpoint("169.254.169.254"), 80, False),  # the cloud's instance metadata
        (alice_notebook, Endpoint("169.254.169.254"), 80, False),
        (alice_master, Endpoint("100.100.100.200"), 80, False),  # another cloud's
    ]
    seen = [(s.ip, d.ip, port, net.allows(s, d, port)) for s, d, port, _ in expected]
    assert seen == [(s.ip, d.ip, port, allowed) for s, d, port, allowed in expected], seen


def test_forged_and_broken_jobs_in_her_namespace_never_reach_bobs_list(
    deployment: Deployment, kube_cluster: KubeCluster
) -> None:
    """Each user's server runs as their notebook (their token, their namespace), as the
    deployment runs it; alice writes what her RBAC allows into her own namespace."""
    alice_ns = deployment.namespaces["alice"]
    custom = kubernetes.client.CustomObjectsApi(deployment.notebook_client("alice"))
    for name, owner in (("forged-for-bob", "bob"), ("broken-of-alice", "alice")):
        custom.create_namespaced_custom_object(
            *PYTORCHJOBS[:2], alice_ns, PYTORCHJOBS[2],
            pytorchjob(name, owner, "{not json", pod("m")["spec"]))  # fmt: skip

    engines = partial(notebook_engines, deployment, kube_cluster)

    async def lists() -> tuple[Any, Any]:
        return (await alice_server.call("alice", "distrun", "jobs"),
                await bob_server.call("bob", "distrun", "jobs"))  # fmt: skip

    with running(DistrunServer(engines("alice")), DistrunServer(engines("bob"))) as servers:
        alice_server, bob_server = servers
        (alice_status, alice_jobs), (bob_status, bob_jobs) = asyncio.run(lists())
    assert (alice_status, bob_status) == (200, 200), (alice_jobs, bob_jobs)
    assert [j["id"] for j in bob_jobs["jobs"]] == []
    [broken] = [j for j in alice_jobs["jobs"] if j["id"] == "broken-of-alice"]
    assert broken["state"] == "failed" and "carries no valid distrun spec" in broken["reason"]
    assert "forged-for-bob" not in [j["id"] for j in alice_jobs["jobs"]]


def notebook_engines(deployment: Deployment, cluster: KubeCluster, user: str) -> dict[str, Any]:
    """The engines of the user's notebook server, as the deployment configures them: its pod's
    ServiceAccount, its own namespace."""
    namespace = deployment.namespaces[user]
    kubeconfig = cluster.service_account_kubeconfig(namespace, "distrun-notebook")
    kwargs = {"kubeconfig": str(kubeconfig), "namespace": namespace}
    return {"kubeflow": {"class": "distrun.engines.kube.kubeflow.KubeflowEngine", "kwargs": kwargs}}


async def test_her_own_job_runs_in_her_namespace_under_the_charts_defaults(
    deployment: Deployment, kube_cluster: KubeCluster, kube_admin: Any, operator_namespace: str
) -> None:
    """What the defaults refuse above is not what distrun's own jobs need: submitted through
    her server with her notebook's credentials, the real operator's pods pass Pod Security,
    the volume policy, the PriorityClass quota and the namespace's ResourceQuota (requests
    from its LimitRange), run, and the job succeeds."""
    alice_ns = deployment.namespaces["alice"]
    cell = "%engine=kubeflow\n%framework=pytorch\n%worker=1\nprint('hi')\n"
    server = DistrunServer(notebook_engines(deployment, kube_cluster, "alice"))
    with training_operator_for(kube_cluster, alice_ns), running(server):
        job = await submit_cell(server, cell)
        pods = await operator_pods(kube_admin, alice_ns, job["id"], 2)
        assert sorted(pods) == ["master-0", "worker-0"]
        await succeed(kube_admin, alice_ns, job["id"])
        deadline = time.monotonic() + WAIT
        while (state := (await server.call("alice", "distrun", "jobs", job["id"]))[1]["state"]) != (
            "succeeded"
        ):
            assert state in ("pending", "running") and time.monotonic() < deadline, state
            await asyncio.sleep(0.5)


def test_a_user_never_takes_over_a_namespace_that_is_not_theirs(
    deployment: Deployment, kube_cluster: KubeCluster
) -> None:
    """A hub user named `ops` against an existing `distrun-ops` (made by someone else): the hook,
    as the hub's ServiceAccount, refuses and binds nothing there; a user named like the
    cluster's own namespace gets none with a template that would give it to them."""
    from dataclasses import replace

    taken = TEMPLATE.format(username="ops")
    kube_cluster.create_namespace(taken)
    try:
        with pytest.raises(deployment.hook.ProfileRefused, match="already exists and is not"):
            deployment._provision("ops")
        rbac = kubernetes.client.RbacAuthorizationV1Api(kube_cluster.admin)
        assert rbac.list_namespaced_role_binding(taken).items == []
    finally:
        kube_cluster.delete_namespace(taken)
    bare = replace(deployment.settings, namespace_template="{username}")
    for user in ("kube-system", deployment.hub_namespace):
        with pytest.raises(deployment.hook.ProfileRefused, match="the cluster's or the hub's"):
            deployment.hook.profile_objects(bare, user)


def test_the_priority_classes_the_values_name_are_the_only_ones_a_user_may_use(
    deployment: Deployment, kube_cluster: KubeCluster
) -> None:
    """`profiles.allowedPriorityClasses: [mu-low]`: carol's namespace admits pods of mu-low and
    of no class, not mu-high (the defaults, none, are alice's in the test above)."""
    from dataclasses import replace

    assert deployment.settings.allowed_priority_classes == (), "the chart's default"
    chosen, deployment.settings = (
        deployment.settings,
        replace(deployment.settings, allowed_priority_classes=("mu-low",)),
    )
    try:
        carol_ns = deployment._provision(f"carol-{secrets.token_hex(2)}")
    finally:
        deployment.settings = chosen
    scheduling = kubernetes.client.SchedulingV1Api(kube_cluster.admin)
    for name, value in (("mu-high", 1_000_000), ("mu-low", 10)):
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
    try:
        admin_core = kubernetes.client.CoreV1Api(kube_cluster.admin)
        attempts = Attempts()
        answer = attempts.refused("a pod of carol's with mu-high", lambda:
            admin_core.create_namespaced_pod(carol_ns, pod("hi", priorityClassName="mu-high"),
                                             dry_run="All"))  # fmt: skip
        assert "exceeded quota: distrun-priority-classes" in answer
        admin_core.create_namespaced_pod(
            carol_ns, pod("lo", priorityClassName="mu-low"), dry_run="All"
        )
        admin_core.create_namespaced_pod(carol_ns, pod("plain"), dry_run="All")  # none named
        print(f"\n{attempts.report()}")
    finally:
        for name in ("mu-high", "mu-low"):
            scheduling.delete_priority_class(name)
        kube_cluster.delete_namespace(carol_ns)
