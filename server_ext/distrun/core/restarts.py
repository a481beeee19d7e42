"""What a failed replica restarts, and how often: a spec's restart settings resolved the same
way for every engine (docs/fault-tolerance.md).

Restarts are asked for by `restart_policy` other than Never, by `restart` or by `max_restarts`.
Then `restart="job"` stops every replica and starts the whole job again (the default for the
synchronous frameworks, whose ranks wait for each other in collectives), `restart="replica"`
restarts only the replica that failed (the operators' per-replica policy). The count is the
job's: `max_restarts`, else `backoff_limit`.
"""

from dataclasses import dataclass

from distrun.core.spec import JobSpec

# Frameworks whose replicas block on each other (all-reduce, rabit, MPI): one lost rank stalls
# the rest, so restarting it alone cannot resume them. TensorFlow with parameter servers
# (asynchronous) is not among them; without them it runs MultiWorkerMirrored (synchronous).
_SYNCHRONOUS = frozenset({"pytorch", "xgboost", "paddle", "jax", "mpi"})


@dataclass(frozen=True)
class RestartPlan:
    scope: str | None  # "job", "replica", or None: a failure ends the job
    limit: int  # restarts allowed, counted for the whole job
    policy: str  # which exits restart: OnFailure, Always or ExitCode (signals only)

    def describe(self) -> str:
        if self.scope is None:
            return "no restarts"
        what = "the whole job" if self.scope == "job" else "the failed replica"
        return f"restarts {what} up to {self.limit} time(s) ({self.policy})"


def is_synchronous(spec: JobSpec) -> bool:
    if spec.framework == "tensorflow":
        return "ps" not in spec.roles
    return spec.framework in _SYNCHRONOUS


def restart_plan(spec: JobSpec) -> RestartPlan:
    if spec.elastic is not None:
        return _elastic_plan(spec)
    asked = (
        spec.restart_policy != "Never" or spec.restart is not None or spec.max_restarts is not None
    )
    policy = spec.restart_policy if spec.restart_policy != "Never" else "OnFailure"
    if not asked:
        return RestartPlan(None, 0, "Never")
    scope = spec.restart or ("job" if is_synchronous(spec) else "replica")
    limit = spec.max_restarts if spec.max_restarts is not None else spec.backoff_limit
    return RestartPlan(scope, limit, policy)


# How often an elastic job's replicas restart when the spec does not say.
ELASTIC_RESTARTS = 3


def _elastic_plan(spec: JobSpec) -> RestartPlan:
    """An elastic job's replica that fails restarts alone and rejoins (the others go on
    without it meanwhile); its agents re-form the group as many times."""
    if spec.max_restarts is not None:
        limit = spec.max_restarts
    elif spec.restart_policy != "Never":
        limit = spec.backoff_limit
    else:
        limit = ELASTIC_RESTARTS
    policy = spec.restart_policy if spec.restart_policy != "Never" else "OnFailure"
    return RestartPlan("replica", limit, policy)
