"""What a job's log says of its metrics, read line by line: each metric's last value and its
values over the steps (the metrics core/metrics finds, as the log viewer plots them). A line
that names no step counts as the metric's next report."""

from dataclasses import dataclass, field

from distrun.core.metrics import parse_line

Point = tuple[float, float]  # (step, value)


@dataclass
class MetricSeries:
    """Every metric of one log. With `max_points`, each series keeps at most that many points
    however long the log (every other point is dropped when it fills; the last is always kept),
    so a reader's memory is bounded; without it, every point."""

    max_points: int | None = None
    last: dict[str, float] = field(default_factory=dict)
    _kept: dict[str, list[Point]] = field(default_factory=dict)
    _newest: dict[str, Point] = field(default_factory=dict)
    _reports: dict[str, int] = field(default_factory=dict)  # reports seen, dropped ones too
    _stride: dict[str, int] = field(default_factory=dict)  # kept: every Nth report

    def read(self, text: str) -> list[str]:
        """Takes a line; returns the names of the metrics it reported."""
        parsed = parse_line(text)
        for name, value in parsed.metrics:
            reports = self._reports.get(name, 0) + 1
            self._reports[name] = reports
            self.last[name] = value
            point = (float(parsed.step if parsed.step is not None else reports), value)
            self._newest[name] = point
            if (reports - 1) % self._stride.get(name, 1) == 0:
                self._keep(name, point)
        return [name for name, _ in parsed.metrics]

    def points(self, name: str) -> list[Point]:
        """The metric's series, its newest point last."""
        kept = self._kept.get(name, [])
        newest = self._newest.get(name)
        return kept if newest is None or (kept and kept[-1] is newest) else [*kept, newest]

    def names(self) -> list[str]:
        return list(self._kept)

    def _keep(self, name: str, point: Point) -> None:
        kept = self._kept.setdefault(name, [])
        kept.append(point)
        if self.max_points is not None and len(kept) >= self.max_points:
            self._kept[name] = kept[::2]
            self._stride[name] = self._stride.get(name, 1) * 2
