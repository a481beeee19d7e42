"""`%elastic=MIN:MAX`: what the header and the spec take and refuse (in words, with the field or
line to fix), how an elastic job restarts and the agent's command line on the local engine (the
cluster engines' mapping: test_kube_restart_settings.py)."""

from typing import Any

import pytest

from distrun.client.cli import build_parser, overrides_from_args
from distrun.core.errors import SpecError
from distrun.core.header import parse_cell, render_header
from distrun.core.restarts import ELASTIC_RESTARTS, restart_plan
from distrun.core.spec import JobSpec
from distrun.engines.local.elastic import agent_argv

THREE = {"master": {"replicas": 1}, "worker": {"replicas": 2}}


def elastic(value: Any, **fields: Any) -> JobSpec:
    data = {"framework": "pytorch", "roles": THREE, "code": "", "elastic": value, **fields}
    return JobSpec.from_dict(data)


def test_a_header_writes_the_range_and_renders_it_back() -> None:
    parsed = parse_cell("%%distrun\n%framework=pytorch\n%worker=2\n%elastic=2:3\nprint(1)\n")
    assert parsed.spec_fields["elastic"] == "2:3"
    assert parsed.field_lines["elastic"] == 4
    spec = elastic("2:3")
    assert spec.elastic_range == (2, 3)
    assert "%elastic=2:3\n" in render_header({"framework": "pytorch", "elastic": "2:3"})


@pytest.mark.parametrize("value", ["3", "a:b", "2-3", "2:", ":3", "-1:2", "2:3:4"])
def test_a_header_value_that_is_not_a_range_is_an_error_on_its_line(value: str) -> None:
    with pytest.raises(SpecError, match=r"line 3: elastic .* write %elastic=2:4"):
        parse_cell(f"%%distrun\n%framework=pytorch\n%elastic={value}\nprint(1)\n")


@pytest.mark.parametrize(
    ("value", "fields", "said", "field"),
    [
        ("3:2", {}, "MIN must be 1 or more and at most MAX", "elastic"),
        ("0:2", {}, "MIN must be 1 or more and at most MAX", "elastic"),
        ("4:6", {}, "the job starts 3 replicas; start between 4 and 6", "elastic"),
        ("1:2", {}, "the job starts 3 replicas; start between 1 and 2", "elastic"),
        ("2:3", {"restart": "job"}, "does not restart as a whole; drop restart=job", "restart"),
        ("1234:5678", {}, "is not MIN:MAX", "elastic"),
        (3, {}, "elastic must be a string", "elastic"),
    ],
)
def test_a_spec_that_cannot_run_elastic_says_what_to_fix(
    value: Any, fields: dict[str, Any], said: str, field: str
) -> None:
    with pytest.raises(SpecError, match=said) as refused:
        elastic(value, **fields)
    assert refused.value.field == field


def test_only_pytorch_runs_elastic() -> None:
    with pytest.raises(SpecError, match="framework jax cannot") as refused:
        JobSpec.from_dict({"framework": "jax", "code": "", "elastic": "1:2"})
    assert refused.value.field == "elastic"


def test_an_elastic_replica_that_fails_restarts_alone() -> None:
    assert restart_plan(elastic("2:3")).scope == "replica"
    assert restart_plan(elastic("2:3")).limit == ELASTIC_RESTARTS
    assert restart_plan(elastic("2:3", max_restarts=5)).limit == 5
    assert restart_plan(elastic("2:3", restart_policy="OnFailure", backoff_limit=1)).limit == 1
    assert restart_plan(elastic("2:3", restart_policy="ExitCode")).policy == "ExitCode"


def test_each_replica_runs_torchs_elastic_agent_at_the_jobs_rendezvous() -> None:
    argv = agent_argv("/py", "main.py", "job-1", (2, 3), 29400, 3)
    assert argv[:3] == ["/py", "-m", "torch.distributed.run"]
    assert argv[-1] == "main.py"
    assert {
        "--nnodes=2:3",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:29400",
        "--rdzv-id=job-1",
        "--max-restarts=3",
    } <= set(argv)


def test_the_command_line_writes_the_range() -> None:
    args = build_parser().parse_args(["run", "train.py", "--elastic", "2:4"])
    assert overrides_from_args(args) == {"elastic": "2:4"}
