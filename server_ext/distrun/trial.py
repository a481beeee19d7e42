"""`distrun.params()`: what a sweep trial's code reads, standard library only.

    params = distrun.params(lr=0.01, batch=32, opt="adam")

Run alone, the cell gets its defaults; run as a trial, the values the sweep chose for it.
"""

import json
import os
from collections.abc import Callable
from typing import Any

from distrun.core.trial_env import PARAMS_ENV

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def params(**defaults: Any) -> dict[str, Any]:
    """`defaults` overridden by this trial's parameters (DISTRUN_PARAMS), each cast to its
    default's type (bool, int, float or str); parameters without a default are added as they
    are. Raises ValueError for a value its default's type cannot take without loss."""
    chosen = _chosen()
    merged = dict(defaults)
    for name, value in chosen.items():
        merged[name] = _cast(name, value, defaults[name]) if name in defaults else value
    return merged


def _chosen() -> dict[str, Any]:
    raw = os.environ.get(PARAMS_ENV)
    if not raw:
        return {}
    try:
        chosen = json.loads(raw)
    except ValueError:
        chosen = None
    if not isinstance(chosen, dict):
        raise ValueError(f"{PARAMS_ENV} is not a JSON object: {raw[:200]!r}")  # noqa: TRY004
    return chosen


def _cast(name: str, value: Any, default: Any) -> Any:
    to_type = _CASTS.get(type(default))
    if to_type is None:  # None, a list, ...: no type to keep
        return value
    cast = to_type(value)
    if cast is None:
        raise ValueError(
            f"parameter {name!r} is {value!r}, which its default {default!r} "
            f"({type(default).__name__}) cannot take"
        )
    return cast


def _to_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _to_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):
        return None


def _to_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = _to_float(value)
    return int(number) if number is not None and number.is_integer() else None


def _to_str(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


_CASTS: dict[type, Callable[[Any], Any]] = {
    bool: _to_bool,
    int: _to_int,
    float: _to_float,
    str: _to_str,
}
