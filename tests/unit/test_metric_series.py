"""core/metric_series.py: every point without a bound; with one, memory bounded however long
the log, the points spread over the whole run and the newest always last."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from distrun.core.metric_series import MetricSeries


def test_steps_from_the_line_or_the_report_count_and_last_values():
    series = MetricSeries()
    assert series.read("step 5 loss=0.5 acc=0.7") == ["loss", "acc"]
    series.read("loss=0.4")  # no step: the metric's second report
    assert series.points("loss") == [(5.0, 0.5), (2.0, 0.4)]
    assert series.last == {"loss": 0.4, "acc": 0.7}
    assert series.names() == ["loss", "acc"] and series.points("nope") == []


@given(st.integers(1, 5000), st.integers(4, 64))
def test_a_bounded_series_keeps_few_points_spread_over_the_run_with_the_newest_last(
    lines: int, bound: int
) -> None:
    series = MetricSeries(max_points=bound)
    for step in range(1, lines + 1):
        series.read(f"step {step} loss={1 / step}")
    points = series.points("loss")
    assert len(points) <= bound + 1
    assert points[0][0] == 1 and points[-1] == (lines, 1 / lines)
    steps = [step for step, _ in points]
    assert steps == sorted(set(steps))
    if lines > bound:  # spread: no gap wider than twice the even spacing (plus the tail)
        gaps = [b - a for a, b in itertools.pairwise(steps[:-1])]
        assert max(gaps, default=0) <= 2 * lines / (bound // 2) + 1
