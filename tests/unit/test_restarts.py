"""The restart settings of a spec resolved for every engine (core/restarts.py)."""

from typing import Any

import pytest

from distrun.core.errors import SpecError
from distrun.core.restarts import restart_plan
from distrun.core.spec import JobSpec


def spec(framework: str = "pytorch", **fields: Any) -> JobSpec:
    return JobSpec.from_dict({"framework": framework, "code": "", **fields})


def test_no_restart_setting_means_a_failure_ends_the_job() -> None:
    plan = restart_plan(spec())
    assert (plan.scope, plan.limit) == (None, 0)


def test_synchronous_frameworks_restart_the_whole_job_by_default() -> None:
    for framework in ("pytorch", "jax", "mpi", "xgboost", "paddle", "tensorflow"):
        plan = restart_plan(spec(framework, restart_policy="OnFailure", backoff_limit=2))
        assert (plan.scope, plan.limit, plan.policy) == ("job", 2, "OnFailure"), framework


def test_asynchronous_jobs_restart_the_failed_replica_by_default() -> None:
    generic = restart_plan(spec("generic", restart_policy="OnFailure", backoff_limit=2))
    ps = restart_plan(spec("tensorflow", roles={"ps": {"replicas": 1}}, max_restarts=1))
    assert (generic.scope, ps.scope) == ("replica", "replica")


def test_max_restarts_is_the_jobs_count_and_asks_for_restarts_on_failure() -> None:
    plan = restart_plan(spec(max_restarts=3, backoff_limit=1))
    assert (plan.scope, plan.limit, plan.policy) == ("job", 3, "OnFailure")
    assert restart_plan(spec(restart="replica")).scope == "replica"


def test_a_bad_restart_scope_says_what_to_write() -> None:
    with pytest.raises(SpecError, match="restart 'all' is not valid; write one of job, replica"):
        spec(restart="all")
    with pytest.raises(SpecError, match="max_restarts"):
        spec(max_restarts=-1)
