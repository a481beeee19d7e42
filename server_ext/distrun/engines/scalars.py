"""A job's TensorBoard scalars, read from whichever engine holds it: an engine that can read
its replicas' directories (`ScalarsEngine`) answers, any other is said not to."""

from distrun.core.scalars import TENSORBOARD_DIR_ENV, ScalarsReport
from distrun.engines.protocol import Engine, ScalarsEngine


def not_read_reason(engine: Engine) -> str:
    return (
        f"the {engine.name} engine does not read TensorBoard scalars: {TENSORBOARD_DIR_ENV} is "
        "given on the local engine only (on a cluster, write them to a shared volume and run "
        "TensorBoard there)"
    )


async def scalars_report(engine: Engine, job_id: str, owner: str) -> ScalarsReport:
    if isinstance(engine, ScalarsEngine):
        return await engine.read_scalars(job_id, owner)
    return ScalarsReport(False, not_read_reason(engine))
