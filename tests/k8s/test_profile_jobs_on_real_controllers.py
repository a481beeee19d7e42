"""A user's own Volcano Job and TrainJob run in her namespace as the chart's defaults make it.

The chart is rendered with its default values and applied to `controllers_cluster` (where
Volcano, JobSet and Trainer reconcile every namespace), the profile hook from its ConfigMap
provisions alice, and distrun's engines submit with exactly her notebook's ServiceAccount:
the controllers' pods must pass Pod Security, the volume policy, the PriorityClass quota and
the ResourceQuota (requests from the LimitRange) and run to the end. test_multi_user.py does
the same for the Training Operator, and the attacks the defaults refuse."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio import config as async_config

from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import KubeEngine
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

from ..helm.test_chart import helm  # noqa: F401  (the helm fixture)
from .cluster import KubeCluster
from .test_multi_user import Deployment
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

EXIT_ANNOTATION = "kwok.distrun.test/exit-code"
SPEC = JobSpec.from_dict(
    {
        "framework": "pytorch",
        "code": "print('hi')\n",
        "roles": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
    }
)


@pytest.fixture(scope="module")
def deployment(
    controllers_cluster: KubeCluster,
    volcano_controllers: None,
    trainer_controllers: None,
    helm: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    with Deployment(controllers_cluster, helm, tmp_path_factory.mktemp("profiles")) as deployed:
        yield deployed


@pytest.fixture
async def notebook_api(
    deployment: Deployment, controllers_cluster: KubeCluster
) -> AsyncIterator[Any]:
    """What alice's notebook pod holds: her namespace's distrun-notebook token."""
    namespace = deployment.namespaces["alice"]
    kubeconfig = controllers_cluster.service_account_kubeconfig(namespace, "distrun-notebook")
    api = await async_config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        yield api


@pytest.fixture
async def admin(controllers_cluster: KubeCluster) -> AsyncIterator[Any]:
    async with controllers_cluster.api_client("admin") as api:
        yield api


@pytest.mark.parametrize("engine_class", [VolcanoEngine, TrainerEngine])
async def test_her_job_runs_to_the_end_in_her_namespace(
    engine_class: type[KubeEngine], deployment: Deployment, notebook_api: Any, admin: Any
) -> None:
    namespace = deployment.namespaces["alice"]
    engine = engine_class(api_client=notebook_api, namespace=namespace)  # type: ignore[call-arg]
    try:
        job = await engine.submit(SPEC, "alice")
        core = client.CoreV1Api(admin)

        async def pods() -> list[Any]:
            listed = await core.list_namespaced_pod(
                namespace, label_selector=engine.pod_selector(job.id)
            )
            return listed.items

        running = await eventually(
            pods,
            lambda ps: len(ps) == 2 and all(p.status.phase == "Running" for p in ps),
            f"{engine.name}'s two pods to run (else: the events of {namespace} say why)",
        )
        for pod in running:
            patch = {"metadata": {"annotations": {EXIT_ANNOTATION: "0"}}}
            with contextlib.suppress(client.exceptions.ApiException):
                await core.patch_namespaced_pod(pod.metadata.name, namespace, patch)
        done = await eventually(
            lambda: engine.get_job(job.id, "alice"), lambda j: j.state.terminal, "its end"
        )
        assert done.state == JobState.SUCCEEDED, done.reason
        await engine.delete(job.id, "alice")
    finally:
        await engine.close()
