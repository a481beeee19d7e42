"""Once the server runs, distrun freezes the heap its start-up made (gc.freeze), so full
garbage collections stop scanning it while logs stream."""

import asyncio
import gc
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrun.engines.local import LocalEngine
from distrun.server import heap_trim
from distrun.server.app import DistrunApp


@pytest.fixture(autouse=True)
def _keep_the_collection_thresholds() -> Iterator[None]:
    """The extension's start sets the process's thresholds (young_collection_threshold)."""
    was = gc.get_threshold()
    yield
    gc.set_threshold(*was)


async def test_the_startup_heap_is_frozen_unless_configured_not_to_be() -> None:
    gc.unfreeze()
    apps = [DistrunApp(freeze_startup_heap=False), DistrunApp()]
    try:
        await apps[0]._start_jupyter_server_extension(None)
        assert gc.get_freeze_count() == 0
        await apps[1]._start_jupyter_server_extension(None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        for app in apps:
            await app.stop_extension()


async def test_the_heap_is_trimmed_every_interval_until_the_extension_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[float] = []
    monkeypatch.setattr(heap_trim, "trim_heap", lambda: trims.append(time.monotonic()) or True)
    off = DistrunApp(trim_heap_interval=0, freeze_startup_heap=False)
    await off._start_jupyter_server_extension(None)
    app = DistrunApp(trim_heap_interval=0.02, freeze_startup_heap=False)
    await app._start_jupyter_server_extension(None)
    await asyncio.sleep(0.3)
    await app.stop_extension()
    await off.stop_extension()
    count = len(trims)
    assert count >= 3  # one every 20 ms, and not from the app configured with 0
    assert count <= 16
    await asyncio.sleep(0.1)
    assert len(trims) == count  # stopped with the extension


async def test_a_kubernetes_engine_beside_does_not_keep_the_heap_from_freezing(
    tmp_path: Path,
) -> None:
    # The Kubernetes engines have per-job hooks of their own (prepare_job and the rest): the
    # start-up once took their `prepare` for the local engine's warm-up, raised on it and
    # never froze the heap in any deployment with a Kubernetes engine.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    kwargs = {"kubeconfig": str(kubeconfig), "namespace": "u-{username}"}
    app = DistrunApp(
        engines={
            "kubeflow": {"class": "distrun.engines.kube.kubeflow.KubeflowEngine", "kwargs": kwargs},
            "trainer": {"class": "distrun.engines.kube.trainer.TrainerEngine", "kwargs": kwargs},
        },
        default_engine="kubeflow",
        state_dir=str(tmp_path / "state"),
    )
    app.initialize_settings()
    await start_and_see_the_heap_frozen(app)


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-secret}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


async def test_a_failed_warm_up_is_logged_and_the_heap_still_freezes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(self: LocalEngine) -> None:
        raise OSError("no room for a supervisor")

    monkeypatch.setattr(LocalEngine, "prepare", broken)
    app = DistrunApp(state_dir=str(tmp_path / "state"))
    app.initialize_settings()
    app.log.addHandler(caplog.handler)  # the app's logger does not reach the root's
    await start_and_see_the_heap_frozen(app)
    assert "could not start the local engine's next supervisor" in caplog.text
    assert "no room for a supervisor" in caplog.text


async def start_and_see_the_heap_frozen(app: DistrunApp) -> None:
    gc.unfreeze()
    try:
        await app._start_jupyter_server_extension(None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        await app.stop_extension()


async def test_the_youngest_generation_is_collected_at_the_configured_threshold() -> None:
    gc.set_threshold(700, 10, 10)
    app = DistrunApp(young_collection_threshold=0, freeze_startup_heap=False)
    await app._start_jupyter_server_extension(None)
    await app.stop_extension()
    assert gc.get_threshold() == (700, 10, 10)
    app = DistrunApp(young_collection_threshold=20_000, freeze_startup_heap=False)
    await app._start_jupyter_server_extension(None)
    await app.stop_extension()
    assert gc.get_threshold() == (20_000, 10, 10)
