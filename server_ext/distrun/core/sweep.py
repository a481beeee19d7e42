"""A parameter sweep: N trials, each an ordinary job run with one point of a parameter space,
compared by one metric their code prints.

`SweepSpec` is the declaration: from the cell header (core/header.py reads each value with
`parse_space`, `parse_objective` and `parse_early_stop`) or from its JSON (`from_dict`); `check`
holds every rule. `expand` gives every trial's parameters, always the same for the same spec:
a grid is the cartesian product in declared order (the first parameter varies slowest), a
random search draws `trials` points from `random.Random(seed)`. A model search (`tpe`, and
`bayes`, the same search under the name Katib gives its own) proposes each next point from the
results so far: core/search.py. `objective_value` and `median_stop` judge trials by the
(step, value) histories core/metrics reads from their logs; core/early_stop.py adds the
asynchronous successive halving rule.
"""

import difflib
import hashlib
import itertools
import json
import math
import random
import re
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Literal, TypeAlias, TypeVar, cast

from distrun.core.errors import SpecError
from distrun.core.metrics import IGNORED_KEYS, STEP_KEYS, is_metric_name

MAX_TRIALS = 1000  # of a random search, and of a grid's product
MAX_PARAMS = 32
DEFAULT_PARALLEL = 2
DEFAULT_MIN_TRIALS = 3
DEFAULT_REDUCTION = 3  # asha: a third of a rung's trials go on to the next
MAX_REDUCTION = 100
SEARCHES = ("grid", "random", "tpe", "bayes")
MODEL_SEARCHES = ("tpe", "bayes")  # proposed from the results so far (core/search.py)
GOALS = ("min", "max")
READS = ("last", "best")
STOP_RULES = ("median", "asha")

Value: TypeAlias = int | float | str
Step: TypeAlias = int | float
History: TypeAlias = Sequence[tuple[Step, float]]
# (setting as a ciao key: "sweep.lr", "trials"; a value) -> how the user would write it.
Example: TypeAlias = Callable[[str, str], str]

PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/+-]{0,199}")  # a value that is a string
_INT_RE = re.compile(r"[-+]?[0-9]{1,30}")
_NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_CALL_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*\((.*)\)", re.DOTALL)


def ciao_example(key: str, value: str) -> str:
    return f"%{key}={value}"


# ---------------------------------------------------------------------------------------------
# The declaration


@dataclass(frozen=True)
class Values:
    """A list: every value in a grid, one at random in a random search."""

    kind: ClassVar[str] = "values"
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Choice:
    kind: ClassVar[str] = "choice"
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Uniform:
    kind: ClassVar[str] = "uniform"
    low: float
    high: float


@dataclass(frozen=True)
class LogUniform:
    kind: ClassVar[str] = "loguniform"
    low: float
    high: float


@dataclass(frozen=True)
class IntRange:
    """Whole numbers from low to high, both included."""

    kind: ClassVar[str] = "int"
    low: int
    high: int


Space: TypeAlias = Values | Choice | Uniform | LogUniform | IntRange
_SPACES: dict[str, type[Space]] = {
    s.kind: s for s in (Values, Choice, Uniform, LogUniform, IntRange)
}
_DISTRIBUTIONS = ("uniform(a,b)", "loguniform(a,b)", "int(a,b)", "choice(x,y,...)")


@dataclass(frozen=True)
class Param:
    name: str
    space: Space


@dataclass(frozen=True)
class Objective:
    metric: str  # as core/metrics reports it: lower case
    goal: Literal["min", "max"]
    read: Literal["last", "best"] = "last"  # a trial's result: its last value, or its best


@dataclass(frozen=True)
class EarlyStop:
    """The median stopping rule, from step `after` on, once `min_trials` others reported; or
    asynchronous successive halving (`asha`), its first rung at step `after` (at least 1), each
    next one `reduction` times further, where only the best 1/`reduction` of a rung go on."""

    rule: Literal["median", "asha"]
    after: int
    min_trials: int = DEFAULT_MIN_TRIALS  # median only
    reduction: int = DEFAULT_REDUCTION  # asha only


@dataclass(frozen=True)
class SweepSpec:
    """Not checked when built: `check` it (`from_dict` and the header parser do)."""

    params: tuple[Param, ...]
    search: Literal["grid", "random", "tpe", "bayes"] = "grid"
    trials: int | None = None  # random and model searches only
    parallel: int = DEFAULT_PARALLEL  # trials running at once
    objective: Objective | None = None
    early_stop: EarlyStop | None = None
    seed: int | None = None  # None: derived from the rest, so the same header draws the same


def default_search(params: Sequence[Param]) -> Literal["grid", "random"]:
    """A sweep with a distribution is a random search, one of lists only a grid."""
    return "grid" if all(isinstance(p.space, Values) for p in params) else "random"


# ---------------------------------------------------------------------------------------------
# Trials


def expand(spec: SweepSpec) -> list[dict[str, Value]]:
    """Every trial's parameters, in order; the same list for equal specs. A model search has
    no list: its points are proposed as the trials report (core/search.py)."""
    if spec.search in MODEL_SEARCHES:
        raise ValueError(f"a {spec.search} search proposes its trials one by one")
    if spec.search == "grid":
        names = [p.name for p in spec.params]
        lists = [cast(Values, p.space).values for p in spec.params]
        return [dict(zip(names, point, strict=True)) for point in itertools.product(*lists)]
    rng = random.Random(effective_seed(spec))
    return [{p.name: _draw(p.space, rng) for p in spec.params} for _ in range(spec.trials or 0)]


def effective_seed(spec: SweepSpec) -> int:
    if spec.seed is not None:
        return spec.seed
    text = json.dumps(to_dict(replace(spec, seed=None)))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def grid_size(spec: SweepSpec) -> int:
    return math.prod(len(cast(Values, p.space).values) for p in spec.params)


def trial_count(spec: SweepSpec) -> int:
    """How many trials `expand` gives, without drawing them."""
    return grid_size(spec) if spec.search == "grid" else spec.trials or 0


def _draw(space: Space, rng: random.Random) -> Value:
    if isinstance(space, Values | Choice):
        return rng.choice(space.values)
    if isinstance(space, IntRange):
        return rng.randint(space.low, space.high)
    if isinstance(space, LogUniform):
        between = _between(math.log(space.low), math.log(space.high), rng.random())
        return min(max(math.exp(between), space.low), space.high)
    return _between(space.low, space.high, rng.random())


def _between(low: float, high: float, fraction: float) -> float:
    # Not low + (high - low) * f: high - low overflows for bounds near the largest float.
    return min(max(low * (1 - fraction) + high * fraction, low), high)


# ---------------------------------------------------------------------------------------------
# Judging trials


def objective_value(
    history: History, goal: Literal["min", "max"], read: Literal["last", "best"]
) -> float | None:
    """A trial's result: its last reported value, or its best; None before any report."""
    if not history:
        return None
    if read == "last":
        return history[-1][1]
    return _best([value for _, value in history], goal)


K = TypeVar("K", bound=Hashable)


def median_stop(
    objective_goal: Literal["min", "max"],
    histories: Mapping[K, History],
    trial: K,
    after: int,
    min_trials: int = DEFAULT_MIN_TRIALS,
) -> bool:
    """The median stopping rule: stop `trial` when, at its last reported step (at least
    `after`), its best value so far is worse than the median of the other trials' best values
    up to that same step. Only trials that have reached the step count, and there must be at
    least `min_trials` of them."""
    history = histories.get(trial)
    if not history or history[-1][0] < after:
        return False
    step = history[-1][0]
    own = best_until(history, step, objective_goal)
    others = [
        best
        for name, other in histories.items()
        if name != trial
        and other
        and max(s for s, _ in other) >= step
        and (best := best_until(other, step, objective_goal)) is not None
    ]
    if own is None or len(others) < max(min_trials, 1):
        return False
    median = statistics.median(others)
    return own > median if objective_goal == "min" else own < median


def best_until(history: History, step: Step, goal: Literal["min", "max"]) -> float | None:
    values = [value for s, value in history if s <= step]
    return _best(values, goal) if values else None


def _best(values: Sequence[float], goal: Literal["min", "max"]) -> float:
    return min(values) if goal == "min" else max(values)


# ---------------------------------------------------------------------------------------------
# Header text: one value of a setting


def parse_space(name: str, text: str, example: Example = ciao_example) -> Space:
    """`0.1,0.01`, `adam`, `uniform(a,b)`, `loguniform(a,b)`, `int(a,b)` or `choice(x,y,...)`."""
    text = text.strip(" \t")
    field = f"sweep.{name}"
    call = _CALL_RE.fullmatch(text)
    if call is None:
        return Values(_values(name, text, example))
    kind, args = call.group(1).lower(), call.group(2)
    if kind == "choice":
        return Choice(_values(name, args, example))
    if kind not in ("uniform", "loguniform", "int"):
        close = difflib.get_close_matches(kind, ["uniform", "loguniform", "int", "choice"], n=1)
        hint = f"did you mean {close[0]}(...)? " if close else ""
        raise SpecError(
            f"{name!r}: unknown distribution {call.group(1)!r}; {hint}the distributions are "
            f"{', '.join(_DISTRIBUTIONS)}, or list the values: {example(field, '0.1,0.01')}",
            field=field,
        )
    bounds = [arg.strip(" \t") for arg in args.split(",")]
    sample = {"uniform": "0.1,0.9", "loguniform": "0.0001,0.1", "int": "1,8"}[kind]
    write = example(field, f"{kind}({sample})")
    if len(bounds) != 2:
        raise SpecError(f"{name!r}: {kind}(...) takes two bounds; write {write}", field=field)
    if kind == "int":
        if not all(_INT_RE.fullmatch(bound) for bound in bounds):
            raise SpecError(f"{name!r}: int(a,b) takes whole numbers; write {write}", field=field)
        return IntRange(int(bounds[0]), int(bounds[1]))
    numbers = [_value(bound) for bound in bounds]
    if not all(isinstance(n, int | float) for n in numbers):
        raise SpecError(f"{name!r}: {kind}(a,b) takes two numbers; write {write}", field=field)
    low, high = (float(cast(float, n)) for n in numbers)
    return Uniform(low, high) if kind == "uniform" else LogUniform(low, high)


def format_space(space: Space) -> str:
    """`space` as `parse_space` reads it back."""
    if isinstance(space, Values):
        return ",".join(format_value(v) for v in space.values)
    if isinstance(space, Choice):
        return f"choice({','.join(format_value(v) for v in space.values)})"
    return f"{space.kind}({format_value(space.low)},{format_value(space.high)})"


def format_value(value: Value) -> str:
    return value if isinstance(value, str) else repr(value)


def _values(name: str, text: str, example: Example) -> tuple[Value, ...]:
    items = [item.strip(" \t") for item in text.split(",")]
    if items == [""]:
        return ()
    values = tuple(_value(item) for item in items)
    for item, value in zip(items, values, strict=True):
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{name!r}: {item} is too large a number", field=f"sweep.{name}")
        if value is None:
            what = "an empty value" if not item else f"{item!r}, neither a number nor a word"
            raise SpecError(
                f"{name!r} has {what}; list numbers or words (letters, digits and _.:/+-, "
                f"starting with a letter) separated by commas: "
                f"{example(f'sweep.{name}', '32,64' if not item else 'adam,sgd')}",
                field=f"sweep.{name}",
            )
    return cast(tuple[Value, ...], values)


def _value(text: str) -> Value | None:
    if _INT_RE.fullmatch(text):
        return int(text)
    if _NUMBER_RE.fullmatch(text):
        return float(text)  # an overflow to inf is left to check()
    return text if WORD_RE.fullmatch(text) else None


def parse_objective(text: str, example: Example = ciao_example) -> Objective:
    """`metric:min`, `metric:max`, optionally `:last` (the default) or `:best`."""
    parts = [part.strip(" \t") for part in text.split(":")]
    write = example("objective", "loss:min")
    if len(parts) not in (2, 3):
        raise SpecError(
            f"objective {text.strip()!r} is not metric:goal[:read]; write {write} (or "
            f"{example('objective', 'accuracy:max:best')} to take each trial's best value)",
            field="objective",
        )
    metric, goal, read = (*parts, "last")[:3]
    objective = Objective(metric.lower(), cast(Any, goal.lower()), cast(Any, read.lower()))
    _check_objective(objective, example)
    return objective


def format_objective(objective: Objective) -> str:
    read = "" if objective.read == "last" else f":{objective.read}"
    return f"{objective.metric}:{objective.goal}{read}"


def parse_early_stop(text: str, example: Example = ciao_example) -> EarlyStop:
    """`median:N` (from step N on), optionally `:M` (once M other trials reported; 3); or
    `asha`, `asha:N` (the first rung at step N; 1), `asha:N:R` (each rung R times further; 3)."""
    parts = [part.strip(" \t") for part in text.split(":")]
    rule = parts[0].lower()
    if rule == "asha" and len(parts) <= 3:
        return _parse_asha(text, parts[1:], example)
    write = example("earlyStop", "median:3")
    if len(parts) not in (2, 3) or rule not in STOP_RULES:
        raise SpecError(
            f"early stop {text.strip()!r} is neither median:N (stop a trial worse than the "
            f"median from step N on) nor asha[:N[:R]] (successive halving from step N); write "
            f"{write} or {example('earlyStop', 'asha:1:3')}",
            field="earlyStop",
        )
    numbers = parts[1:]
    if not all(re.fullmatch(r"[0-9]{1,9}", n) for n in numbers):
        raise SpecError(
            f"early stop {text.strip()!r}: the steps (and the optional least number of trials "
            f"to compare with) are whole numbers; write {write} or "
            f"{example('earlyStop', 'median:3:5')}",
            field="earlyStop",
        )
    stop = EarlyStop("median", *(int(n) for n in numbers))
    _check_early_stop(stop, example)
    return stop


def _parse_asha(text: str, numbers: list[str], example: Example) -> EarlyStop:
    if not all(re.fullmatch(r"[0-9]{1,9}", n) for n in numbers):
        raise SpecError(
            f"early stop {text.strip()!r}: asha's first rung (a step) and reduction are whole "
            f"numbers; write {example('earlyStop', 'asha:1:3')}",
            field="earlyStop",
        )
    after = int(numbers[0]) if numbers else 1
    reduction = int(numbers[1]) if len(numbers) > 1 else DEFAULT_REDUCTION
    stop = EarlyStop("asha", after, reduction=reduction)
    _check_early_stop(stop, example)
    return stop


def format_early_stop(stop: EarlyStop) -> str:
    if stop.rule == "asha":
        reduction = "" if stop.reduction == DEFAULT_REDUCTION else f":{stop.reduction}"
        return f"asha:{stop.after}{reduction}"
    least = "" if stop.min_trials == DEFAULT_MIN_TRIALS else f":{stop.min_trials}"
    return f"{stop.rule}:{stop.after}{least}"


# ---------------------------------------------------------------------------------------------
# The rules


def check(spec: SweepSpec, example: Example = ciao_example) -> None:
    """Raises SpecError, its field the setting at fault ("sweep.lr", "trials", "objective",
    "sweep" for the sweep as a whole), unless `spec` is a sweep that can run."""
    if not spec.params:
        raise SpecError(
            "sweep settings need a swept parameter; add one, like "
            f"{example('sweep.lr', '0.1,0.01')}",
            field="sweep",
        )
    if len(spec.params) > MAX_PARAMS:
        raise SpecError(f"a sweep has at most {MAX_PARAMS} parameters", field="sweep")
    if spec.search not in SEARCHES:
        raise SpecError(
            f"search {spec.search!r} is not one of {', '.join(SEARCHES)}; write "
            f"{example('search', 'tpe')} (or random, grid)",
            field="search",
        )
    _check_names(spec.params)
    for param in spec.params:
        _check_space(param, spec.search, example)
    _check_trials(spec, example)
    if not _is_int(spec.parallel) or not 1 <= spec.parallel <= MAX_TRIALS:
        raise SpecError(
            f"parallel {spec.parallel!r} is not a number of trials at once from 1 to "
            f"{MAX_TRIALS}; write {example('parallel', str(DEFAULT_PARALLEL))}",
            field="parallel",
        )
    if spec.objective is not None:
        _check_objective(spec.objective, example)
    if spec.early_stop is not None:
        _check_early_stop(spec.early_stop, example)
        if spec.objective is None:
            raise SpecError(
                f"early stopping compares trials by their objective; add "
                f"{example('objective', 'loss:min')}",
                field="earlyStop",
            )
    if spec.seed is not None and (not _is_int(spec.seed) or not 0 <= spec.seed < 2**63):
        raise SpecError(f"seed {spec.seed!r} is not a whole number below 2**63", field="seed")


def _check_names(params: Sequence[Param]) -> None:
    seen: dict[str, str] = {}  # the environment variable's part -> the name
    for param in params:
        name = param.name
        if not isinstance(name, str) or not PARAM_NAME_RE.fullmatch(name):
            raise SpecError(
                f"parameter name {name!r} is not a name of letters, digits and _ (starting "
                "with a letter or _, at most 64)",
                field=f"sweep.{name}",
            )
        other = seen.setdefault(name.upper(), name)
        if other == name and param is not next(p for p in params if p.name == name):
            raise SpecError(f"parameter {name!r} is declared twice", field=f"sweep.{name}")
        if other != name:
            raise SpecError(
                f"parameters {other!r} and {name!r} differ only in case; both would be "
                f"DISTRUN_PARAM_{name.upper()}, rename one",
                field=f"sweep.{name}",
            )


def _check_space(param: Param, search: str, example: Example) -> None:
    name, space, field = param.name, param.space, f"sweep.{param.name}"
    if isinstance(space, Values | Choice):
        _check_values(name, space, example)
    elif isinstance(space, IntRange):
        _check_bounds(name, space, _is_int, "whole numbers", example)
    else:
        _check_bounds(name, space, _is_number, "numbers", example)
        if isinstance(space, LogUniform) and space.low <= 0:
            raise SpecError(
                f"{name!r} is {format_space(space)}; loguniform needs bounds above 0, like "
                f"{example(field, 'loguniform(0.0001,0.1)')}",
                field=field,
            )
    if search == "grid" and not isinstance(space, Values):
        listed = _as_list(space)
        raise SpecError(
            f"{name!r} is {format_space(space)}; a grid needs a list of values, e.g. "
            f"{example(field, listed)} (or {example('search', 'random')} to draw at random)",
            field=field,
        )


def _check_values(name: str, space: Values | Choice, example: Example) -> None:
    field = f"sweep.{name}"
    if not isinstance(space.values, tuple) or not space.values:
        raise SpecError(
            f"{name!r} has no values; list them, like {example(field, '0.1,0.01')}", field=field
        )
    for value in space.values:
        word = isinstance(value, str) and WORD_RE.fullmatch(value)
        if not (word or _is_number(value)):
            raise SpecError(
                f"{name!r}: {value!r} is neither a finite number nor a word (letters, digits "
                "and _.:/+-, starting with a letter)",
                field=field,
            )
    for index, value in enumerate(space.values):
        if value in space.values[:index]:
            raise SpecError(f"{name!r} lists {format_value(value)} twice", field=field)


def _check_bounds(
    name: str,
    space: Uniform | LogUniform | IntRange,
    is_bound: Callable[[object], bool],
    what: str,
    example: Example,
) -> None:
    field = f"sweep.{name}"
    if not (is_bound(space.low) and is_bound(space.high)):
        raise SpecError(f"{name!r}: the bounds of {space.kind} are finite {what}", field=field)
    if space.low == space.high:
        raise SpecError(
            f"{name!r} is {format_space(space)}, its bounds equal; for one value write "
            f"{example(field, format_value(space.low))}",
            field=field,
        )
    if space.low > space.high:
        swapped = format_space(cast(Any, type(space))(space.high, space.low))
        raise SpecError(
            f"{name!r} is {format_space(space)}, its bounds reversed; write the smaller first: "
            f"{example(field, swapped)}",
            field=field,
        )


def _check_trials(spec: SweepSpec, example: Example) -> None:
    if spec.search != "grid":
        if spec.trials is None:
            raise SpecError(
                f"a {spec.search} search needs its number of trials; add {example('trials', '10')}",
                field="trials",
            )
        if not _is_int(spec.trials) or not 1 <= spec.trials <= MAX_TRIALS:
            raise SpecError(
                f"trials {spec.trials!r} is not a number of trials from 1 to {MAX_TRIALS}",
                field="trials",
            )
        return
    size = 1
    for param in spec.params:
        size *= len(cast(Values, param.space).values)
        if size > MAX_TRIALS:
            raise SpecError(
                f"the grid has {grid_size(spec):,} trials, over the limit of {MAX_TRIALS}; "
                f"list fewer values, or draw some at random with {example('search', 'random')} "
                f"and {example('trials', '50')}",
                field=f"sweep.{param.name}",
            )
    if spec.trials is not None:
        raise SpecError(
            f"a grid runs every combination ({size} trials), so it takes no trials setting; "
            f"remove it, or add {example('search', 'random')} to draw {spec.trials!r} at random",
            field="trials",
        )


def _check_objective(objective: Objective, example: Example) -> None:
    metric, write = objective.metric, example("objective", "loss:min")
    if not isinstance(metric, str) or not is_metric_name(metric):
        reason = (
            "the step, not a metric"
            if isinstance(metric, str) and metric.lower() in STEP_KEYS
            else "a number the metric reader ignores (it identifies, it does not measure)"
            if isinstance(metric, str) and metric.lower() in IGNORED_KEYS
            else "not a metric name (letters, digits, _, and / or . between parts, like "
            "val_loss or train/loss)"
        )
        raise SpecError(f"objective {metric!r} is {reason}; write {write}", field="objective")
    if objective.goal not in GOALS:
        raise SpecError(
            f"objective goal {objective.goal!r} is neither min nor max; write {write}",
            field="objective",
        )
    if objective.read not in READS:
        raise SpecError(
            f"objective read {objective.read!r} is neither last (each trial's last value) nor "
            "best; "
            f"write {example('objective', f'{metric}:{objective.goal}:best')}",
            field="objective",
        )


def _check_early_stop(stop: EarlyStop, example: Example) -> None:
    if stop.rule not in STOP_RULES:
        raise SpecError(
            f"early stop rule {stop.rule!r} is neither median nor asha", field="earlyStop"
        )
    if not _is_int(stop.after) or stop.after < (1 if stop.rule == "asha" else 0):
        raise SpecError(
            f"early stop after {stop.after!r} is not a step"
            + (" (asha's first rung is at step 1 or later)" if stop.rule == "asha" else ""),
            field="earlyStop",
        )
    if not _is_int(stop.min_trials) or not 1 <= stop.min_trials <= MAX_TRIALS:
        raise SpecError(
            f"early stop needs from 1 to {MAX_TRIALS} trials to compare with, not "
            f"{stop.min_trials!r}; write {example('earlyStop', 'median:3:3')}",
            field="earlyStop",
        )
    if not _is_int(stop.reduction) or not 2 <= stop.reduction <= MAX_REDUCTION:
        raise SpecError(
            f"asha's reduction {stop.reduction!r} is not a whole number from 2 to "
            f"{MAX_REDUCTION} (how many times fewer trials each rung keeps); write "
            f"{example('earlyStop', 'asha:1:3')}",
            field="earlyStop",
        )


def _as_list(space: Space) -> str:
    if isinstance(space, Values | Choice):
        return ",".join(format_value(v) for v in space.values)
    if isinstance(space, IntRange):
        return ",".join(str(n) for n in range(space.low, min(space.high, space.low + 3) + 1))
    return f"{format_value(space.low)},{format_value(space.high)}"


def _is_int(value: object) -> bool:
    # Below 10**30: longer digits are read as a float (and a header would write them so).
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**30


def _is_number(value: object) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


# ---------------------------------------------------------------------------------------------
# JSON


def to_dict(spec: SweepSpec) -> dict[str, Any]:
    """`spec` as JSON: {"params": {"lr": {"loguniform": [0.0001, 0.1]}, ...}, "search", ...}."""
    return {
        "params": {p.name: {p.space.kind: _space_json(p.space)} for p in spec.params},
        "search": spec.search,
        "trials": spec.trials,
        "parallel": spec.parallel,
        "objective": None if spec.objective is None else asdict(spec.objective),
        "early_stop": None if spec.early_stop is None else _early_stop_json(spec.early_stop),
        "seed": spec.seed,
    }


def _early_stop_json(stop: EarlyStop) -> dict[str, Any]:
    # The reduction only where it means something: a median sweep's JSON (and so the seed
    # derived from it) stays what it was.
    data = asdict(stop)
    if stop.rule != "asha":
        del data["reduction"]
    return data


def from_dict(data: Any) -> SweepSpec:
    """The checked spec of `to_dict`'s shape; "search" (from the parameters), "trials",
    "parallel", "objective", "early_stop" and "seed" may be left out."""
    if not isinstance(data, Mapping):
        raise SpecError("a sweep must be an object", field="sweep")
    _only(data, ("params", "search", "trials", "parallel", "objective", "early_stop", "seed"), "")
    raw_params = data.get("params")
    if not isinstance(raw_params, Mapping):
        raise SpecError("sweep params must map names to spaces", field="sweep")
    params = tuple(Param(name, _space_from_json(name, raw)) for name, raw in raw_params.items())
    spec = SweepSpec(
        params,
        search=data.get("search") or default_search(params),
        trials=data.get("trials"),
        parallel=data.get("parallel", DEFAULT_PARALLEL),
        objective=_objective_from_json(data.get("objective")),
        early_stop=_early_stop_from_json(data.get("early_stop")),
        seed=data.get("seed"),
    )
    check(spec)
    return spec


def _space_json(space: Space) -> list[Value]:
    if isinstance(space, Values | Choice):
        return list(space.values)
    return [space.low, space.high]


def _space_from_json(name: Any, raw: Any) -> Space:
    field = f"sweep.{name}"
    if not isinstance(raw, Mapping) or len(raw) != 1 or next(iter(raw)) not in _SPACES:
        raise SpecError(
            f"sweep param {name!r} must be one of {{kind: [...]}} with kind one of "
            f"{', '.join(_SPACES)}",
            field=field,
        )
    kind, payload = next(iter(raw.items()))
    if not isinstance(payload, list) or (kind not in ("values", "choice") and len(payload) != 2):
        raise SpecError(f"sweep param {name!r}: {kind} takes a list", field=field)
    if kind in ("uniform", "loguniform"):
        payload = [float(p) if _is_int(p) else p for p in payload]
    space_type: Any = _SPACES[kind]
    return cast(
        Space, space_type(tuple(payload)) if kind in ("values", "choice") else space_type(*payload)
    )


def _objective_from_json(raw: Any) -> Objective | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not {"metric", "goal"} <= set(raw):
        raise SpecError("objective must be {metric, goal, read}", field="objective")
    _only(raw, ("metric", "goal", "read"), "objective")
    metric = raw["metric"].lower() if isinstance(raw["metric"], str) else raw["metric"]
    return Objective(metric, raw["goal"], raw.get("read", "last"))


def _early_stop_from_json(raw: Any) -> EarlyStop | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not {"rule", "after"} <= set(raw):
        raise SpecError(
            "early_stop must be {rule, after, min_trials, reduction}", field="earlyStop"
        )
    _only(raw, ("rule", "after", "min_trials", "reduction"), "earlyStop")
    return EarlyStop(
        raw["rule"],
        raw["after"],
        raw.get("min_trials", DEFAULT_MIN_TRIALS),
        raw.get("reduction", DEFAULT_REDUCTION),
    )


def _only(data: Mapping[str, Any], keys: Sequence[str], field: str) -> None:
    unknown = sorted(set(data) - set(keys), key=str)
    if unknown:
        raise SpecError(
            f"unknown sweep field {unknown[0]!r}; the fields are {', '.join(keys)}",
            field=field or "sweep",
        )
