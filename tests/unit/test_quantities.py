"""Resource quantities are read by Kubernetes' own grammar and refused beyond its limits."""

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity

from distrun.core.errors import SpecError
from distrun.core.header import parse_cell
from distrun.core.quantities import (
    MAX_INT64,
    QUANTITY_RE,
    QuantityError,
    check_cpu,
    check_memory,
    quantity_value,
)
from distrun.core.spec import JobSpec

QUICK = settings(deadline=None, max_examples=100)


def spec_with(**resources: object) -> JobSpec:
    role = {"replicas": 1, "resources": resources}
    return JobSpec.from_dict({"framework": "pytorch", "code": "x", "roles": {"worker": role}})


@pytest.mark.parametrize(
    ("text", "value"),
    [("2", 2), ("500m", Fraction(1, 2)), ("0.5", Fraction(1, 2)), ("1e3", 1000),
     ("1E-3", Fraction(1, 1000)), ("2Gi", 2 << 30), ("1k", 1000), ("+1", 1), ("1.", 1),
     (".5", Fraction(1, 2)), ("-0", 0), ("9223372036854775807", MAX_INT64), ("7Ei", 7 << 60)],
)  # fmt: skip
def test_quantities_are_read_as_kubernetes_reads_them(text: str, value: Fraction) -> None:
    assert quantity_value(text) == value


@pytest.mark.parametrize(
    ("text", "why"),
    [("9" * 5000, "more than Kubernetes allows"), ("9223372036854775808", "more than Kubernetes"),
     ("8Ei", "more than Kubernetes"), ("1e19", "more than Kubernetes"),
     ("1e999999999", "more than Kubernetes"), ("-1", "is negative"), ("1K", "not a Kubernetes"),
     ("1 ", "not a Kubernetes"), ("", "not a Kubernetes"), ("1e", "not a Kubernetes"),
     ("0x10", "not a Kubernetes"), ("1_000", "not a Kubernetes"), ("inf", "not a Kubernetes"),
     ("١", "not a Kubernetes"), ("1Mi1", "not a Kubernetes"), ("1e1.5", "not a Kubernetes"),
     ("1e-10", "finer than a nano-unit"), ("1e-99999999", "finer than a nano-unit")],
)  # fmt: skip
def test_what_kubernetes_would_refuse_or_change_is_refused(text: str, why: str) -> None:
    with pytest.raises(QuantityError, match=why):
        quantity_value(text)


def test_a_5000_digit_cpu_is_refused_with_a_short_clear_message() -> None:
    with pytest.raises(SpecError) as error:
        spec_with(cpu="9" * 5000)
    message = str(error.value)
    assert error.value.field == "roles.worker.cpu"
    assert "(5000 characters)" in message and "more than Kubernetes allows" in message
    assert "write a CPU quantity like 2, 0.5 or 500m" in message and len(message) < 250
    with pytest.raises(SpecError, match=r"^line 2: cpu .*\(5000 characters\).*more than"):
        parse_cell("%framework=pytorch\n%cpu=" + "9" * 5000 + "\nx = 1")


def test_cpu_finer_than_a_millicore_and_memory_finer_than_a_byte_are_refused() -> None:
    with pytest.raises(SpecError, match="finer than a millicore"):
        spec_with(cpu="0.1m")
    with pytest.raises(SpecError, match="not a whole number of bytes"):
        spec_with(memory="1.5")
    with pytest.raises(SpecError, match=r"more than Kubernetes allows \(9223372036854775807m\)"):
        spec_with(cpu="9223372036854775807")
    assert spec_with(cpu="1500m", memory="1.5Gi").roles["worker"].resources.memory == "1.5Gi"


@QUICK
@given(st.text(max_size=60))
@example("1e-99999999")
@example("0e99999999")
def test_no_text_makes_anything_but_a_quantity_error(text: str) -> None:
    for check in (check_cpu, check_memory):
        try:
            assert check(text) == text
        except QuantityError as error:
            assert str(error)


@QUICK
@given(st.from_regex(QUANTITY_RE, fullmatch=True))
def test_every_accepted_quantity_has_the_value_kubernetes_gives_it(text: str) -> None:
    """The `kubernetes` client's parser as a second reading (it is laxer: it reads "1K" too)."""
    try:
        value = quantity_value(text)
    except QuantityError:
        return
    assert 0 <= value <= MAX_INT64
    expected = parse_quantity(text)
    assert Fraction(Decimal(expected)) == value, (text, expected)
