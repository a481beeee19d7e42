"""What each replica of a job uses (CPU, memory, GPUs), read from whichever engine holds it:
an engine that samples (`UsageEngine`) answers, any other is said not to."""

from collections.abc import AsyncGenerator

from distrun.core.usage import UsageReport, UsageUpdate
from distrun.engines.protocol import Engine, UsageEngine


def not_sampled_reason(engine: Engine) -> str:
    return f"the {engine.name} engine does not sample replicas' usage"


async def usage_report(engine: Engine, job_id: str, owner: str, since: int) -> UsageReport:
    if isinstance(engine, UsageEngine):
        return await engine.read_usage(job_id, owner, since=since)
    return UsageReport(False, not_sampled_reason(engine))


async def follow_usage(
    engine: Engine, job_id: str, owner: str, since: int
) -> AsyncGenerator[UsageUpdate, None]:
    """The engine's samples from `since` on, then as they come; nothing from an engine that
    does not sample."""
    if isinstance(engine, UsageEngine):
        async for update in engine.follow_usage(job_id, owner, since=since):
            yield update
