"""TensorBoard scalars a job's replicas wrote: each replica gets `DISTRUN_TENSORBOARD_DIR`,
its own directory, and the Metrics tab plots what `SummaryWriter`, `tf.summary` or
tensorboardX wrote there beside the metrics read from log lines."""

from dataclasses import dataclass, field
from typing import Any

TENSORBOARD_DIR_ENV = "DISTRUN_TENSORBOARD_DIR"
MAX_POINTS_PER_TAG = 2000  # TensorBoard's reservoir keeps this many, evenly, of a longer series

# replica -> tag -> [(step, value), ...] in step order
Scalars = dict[str, dict[str, list[tuple[int, float]]]]


@dataclass(frozen=True)
class ScalarsReport:
    """What the engine can say of a job's scalars: none read (`available` False) with why,
    or every replica's series so far."""

    available: bool
    reason: str | None = None
    replicas: Scalars = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "replicas": {
                replica: {
                    tag: [[step, value] for step, value in points] for tag, points in tags.items()
                }
                for replica, tags in self.replicas.items()
            },
        }
