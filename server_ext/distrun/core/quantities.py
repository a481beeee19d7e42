"""Kubernetes resource quantities (a role's `cpu` and `memory`), read by the API server's rules.

The grammar is apimachinery's `resource.Quantity`: an optional sign, a decimal number, then at
most one suffix: binary (Ki Mi Gi Ti Pi Ei), decimal SI (n u m k M G T P E) or a decimal
exponent (e3, E-2). The API server silently caps a quantity at 2^63-1 and rounds a value
finer than its unit up; distrun refuses such values instead, so a job never runs with other
resources than the ones written, and refuses negative ones (a request cannot be).

Written here rather than taken from the `kubernetes` client's `parse_quantity`: core imports
nothing outside the standard library (the client is an optional extra), and that function
sets no limit (a 5000-digit number is a quantity to it).
"""

import re
from fractions import Fraction

MAX_INT64 = 2**63 - 1
# Longer than any quantity within the limits needs ("9223372036854775807m" is 20).
MAX_QUANTITY_CHARS = 40
QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<si>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?\Z"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_SI = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Beyond these exponents no number of MAX_QUANTITY_CHARS digits is within the limits.
_EXPONENT_BOUND = 2 * MAX_QUANTITY_CHARS

_FINER = "is finer than a nano-unit (1n), which Kubernetes would round up"
CPU_WRITE = "a CPU quantity like 2, 0.5 or 500m"
MEMORY_WRITE = "a memory quantity like 4Gi, 512Mi or 1G"


class QuantityError(ValueError):
    """What is wrong with a quantity, worded to follow it ("'1x' is not ...")."""


def quantity_value(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity; QuantityError when the API server would not
    parse it, or would change it (a negative value, beyond its cap)."""
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(
            f"is longer than {MAX_QUANTITY_CHARS} characters: more than Kubernetes allows"
        )
    match = QUANTITY_RE.match(text)
    if match is None:
        raise QuantityError("is not a Kubernetes quantity")
    number = Fraction(match["number"])
    if match["sign"] == "-" and number:
        raise QuantityError("is negative")
    if not number:
        return number
    if match["binary"]:
        value: Fraction = number * 1024 ** _BINARY[match["binary"]]
    else:
        exponent = _SI[match["si"]] if match["si"] else int(match["exponent"] or 0)
        if exponent > _EXPONENT_BOUND:
            raise QuantityError(f"is more than Kubernetes allows ({MAX_INT64})")
        if exponent < -_EXPONENT_BOUND:
            raise QuantityError(_FINER)
        value = number * Fraction(10) ** exponent
    if value > MAX_INT64:
        raise QuantityError(f"is more than Kubernetes allows ({MAX_INT64})")
    if (value * 10**9).denominator != 1:
        raise QuantityError(_FINER)
    return value


def check_cpu(text: str) -> str:
    """`text` when it is a CPU quantity Kubernetes keeps as written: whole millicores."""
    millicores = quantity_value(text) * 1000
    if millicores.denominator != 1:
        raise QuantityError("is finer than a millicore (1m), which Kubernetes would round up")
    if millicores > MAX_INT64:
        raise QuantityError(f"is more than Kubernetes allows ({MAX_INT64}m)")
    return text


def check_memory(text: str) -> str:
    """`text` when it is a memory quantity of whole bytes."""
    if quantity_value(text).denominator != 1:
        raise QuantityError("is not a whole number of bytes")
    return text
