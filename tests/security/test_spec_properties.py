"""Property tests of `JobSpec.from_dict`, the one edge where untrusted JSON becomes a spec.

Whatever arrives, only SpecError or LimitExceeded escape; whatever is accepted yields names that
Kubernetes accepts (DNS-1035 labels within 63 characters) and strings with nothing a manifest,
a shell or a YAML document could be tricked by.
"""

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distrun.core import jobids
from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.quantities import QUANTITY_RE
from distrun.core.spec import (
    ENGINE_NAME_RE,
    ENV_NAME_RE,
    IMAGE_RE,
    JOB_NAME_RE,
    NAMESPACE_RE,
    JobSpec,
    Limits,
)

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
KUBERNETES_NAME_MAX = 63
LIMITS = Limits(max_replicas=200, max_payload_bytes=10_000)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
# Strings that look valid, then something a template or a manifest could trip on.
INJECTIONS = ["", "\n", "\r\n", "\nkind: Secret", '"', "'", "{{ x }}", ": x", " ", "\t", "\x00"]
almost_names = st.builds(
    lambda base, tail: base + tail,
    st.sampled_from(["job", "default", "python:3.11", "A", "2", "500m", "4Gi", "local"]),
    st.sampled_from(INJECTIONS),
)


def matching(pattern: re.Pattern[str]) -> st.SearchStrategy[str]:
    """Strings hypothesis builds from a field's own pattern (a `$` there admits a final "\\n")."""
    return st.from_regex(pattern)


field_values: dict[str, st.SearchStrategy[Any]] = {
    "name": matching(JOB_NAME_RE) | almost_names | json_values,
    "image": matching(IMAGE_RE) | almost_names | st.none(),
    "engine": matching(ENGINE_NAME_RE) | almost_names | st.none(),
    "namespace": matching(NAMESPACE_RE) | almost_names | st.none(),
    "queue": matching(NAMESPACE_RE) | almost_names | st.none(),
    "priority_class": matching(NAMESPACE_RE) | almost_names | st.none(),
    "env": st.dictionaries(matching(ENV_NAME_RE) | almost_names, st.text(max_size=20), max_size=3)
    | json_values,
    "code": st.text(max_size=50) | json_values,
    "files": st.dictionaries(st.text(max_size=20), st.sampled_from(["", "eA==", "!!"]), max_size=3)
    | json_values,
    "restart_policy": st.sampled_from(["Never", "OnFailure", "Never\n"]) | json_values,
    "backoff_limit": st.integers(-5, 200) | json_values,
    "active_deadline_seconds": st.integers(-5, 10**8) | st.none() | json_values,
}
resources = st.fixed_dictionaries(
    {},
    optional={
        "cpu": matching(QUANTITY_RE) | almost_names | json_values,
        "memory": matching(QUANTITY_RE) | almost_names | json_values,
        "gpu": st.integers(-1, 20) | json_values,
    },
)
role_specs = st.fixed_dictionaries(
    {"replicas": st.integers(-1, 80) | json_values}, optional={"resources": resources}
)


@st.composite
def near_valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    framework = draw(st.sampled_from(sorted(FRAMEWORKS)))
    roles = draw(
        st.dictionaries(
            st.sampled_from(FRAMEWORKS[framework].role_names) | st.text(max_size=8),
            role_specs,
            max_size=3,
        )
        | st.none()
    )
    spec: dict[str, Any] = {"framework": framework, "code": "print(1)"}
    if roles is not None:
        spec["roles"] = roles
    for key in draw(st.sets(st.sampled_from(sorted(field_values)), max_size=6)):
        spec[key] = draw(field_values[key])
    return spec


def parse(data: Any) -> JobSpec | None:
    try:
        return JobSpec.from_dict(data, LIMITS)
    except (SpecError, LimitExceeded):
        return None


def assert_safe_for_kubernetes(spec: JobSpec) -> None:
    assert DNS_1035.fullmatch(spec.name) and len(spec.name) <= 32, spec.name
    job_id = jobids.new_job_id(spec.name)
    assert DNS_1035.fullmatch(job_id) and len(job_id) <= jobids.MAX_JOB_ID_LENGTH, job_id
    for replica in spec.replica_names():
        pod = f"{job_id}-{replica}"
        assert DNS_1035.fullmatch(pod) and len(pod) <= KUBERNETES_NAME_MAX, pod
    for label in (spec.namespace, spec.queue, spec.priority_class):
        assert label is None or (DNS_1123.fullmatch(label) and len(label) <= 63), label
    if spec.engine is not None:
        assert re.fullmatch(r"[a-z][a-z0-9-]*", spec.engine), spec.engine
    if spec.image is not None:
        assert re.fullmatch(r"[A-Za-z0-9._/:@+-]+", spec.image), spec.image
    for name, value in spec.env.items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), name
        assert "\x00" not in value
    for role in spec.roles.values():
        for quantity in (role.resources.cpu, role.resources.memory):
            # The API server's own grammar (a sign, an exponent: "-0", "+1", "5e3"), whole.
            assert quantity is None or QUANTITY_RE.fullmatch(quantity), quantity


SETTINGS = settings(
    max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(json_values)
def test_arbitrary_json_is_rejected_with_a_spec_error_or_accepted_safely(data: Any):
    spec = parse(data)
    if spec is not None:
        assert_safe_for_kubernetes(spec)


@SETTINGS
@given(near_valid_specs())
def test_an_accepted_spec_derives_only_valid_kubernetes_names(data: dict[str, Any]):
    spec = parse(data)
    if spec is not None:
        assert_safe_for_kubernetes(spec)
        assert JobSpec.from_dict(spec.to_dict(), LIMITS) == spec  # a stored spec reloads as is


def test_near_valid_specs_are_often_accepted():
    """The property above is only worth something if many generated specs pass validation."""
    accepted = 0

    @settings(max_examples=150, derandomize=True, deadline=None)
    @given(near_valid_specs())
    def count(data: dict[str, Any]) -> None:
        nonlocal accepted
        accepted += parse(data) is not None

    count()
    assert accepted >= 15
