"""What the cluster engines do with the restart settings they cannot map yet: refuse them in
words (docs/fault-tolerance.md), before asking any cluster."""

from typing import Any

import pytest

from distrun.core.errors import SpecError
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import KubeEngine
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine


@pytest.mark.parametrize("engine", [KubeflowEngine, TrainerEngine, VolcanoEngine])
@pytest.mark.parametrize("fields", [{"restart": "job"}, {"max_restarts": 2}])
async def test_a_cluster_engine_refuses_whole_job_restart_it_cannot_map_yet(
    engine: type[KubeEngine], fields: dict[str, Any]
) -> None:
    spec = JobSpec.from_dict({"framework": "pytorch", "code": "", **fields})
    with pytest.raises(SpecError, match="local engine only for now") as refused:
        await engine().submit(spec, "alice")
    assert refused.value.field == next(iter(fields))
