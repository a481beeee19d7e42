"""Example tests of the cell-header parser: both syntaxes, every key, every error path."""

import traceback

import pytest

from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.header import needs_ipython, parse_cell, render_header, spec_from_cell
from distrun.core.spec import JobSpec, Limits

# ---------------------------------------------------------------------------------------------
# ciao's syntax


def test_ciao_readme_tensorflow_header_gives_ps_and_workers():
    parsed = parse_cell("%framework=tensorflow\n%ps=1\n%worker=2\n%cleanPolicy=all\nimport os\n")
    assert parsed.has_header
    assert parsed.spec_fields == {
        "framework": "tensorflow",
        "roles": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
        "clean_pod_policy": "All",
    }
    assert parsed.code == "\n\n\n\nimport os\n"


def test_ciao_readme_pytorch_header_gives_master_and_workers():
    parsed = parse_cell("%framework=pytorch\n%master=1\n%worker=3\nprint('hi')")
    assert parsed.spec_fields == {
        "framework": "pytorch",
        "roles": {"master": {"replicas": 1}, "worker": {"replicas": 3}},
    }


def test_ciao_role_line_resources_after_semicolons_belong_to_that_role():
    parsed = parse_cell(
        "%framework=tensorflow\n%ps=1;%cpu=1;%memory=1Gi\n%worker=2;%cpu=2;%memory=4Gi\nx = 1"
    )
    assert parsed.spec_fields["roles"] == {
        "ps": {"replicas": 1, "resources": {"cpu": "1", "memory": "1Gi"}},
        "worker": {"replicas": 2, "resources": {"cpu": "2", "memory": "4Gi"}},
    }


@pytest.mark.parametrize(
    ("written", "policy"),
    [("all", "All"), ("running", "Running"), ("none", "None"), ("All", "All"), ("NONE", "None")],
)
def test_ciao_clean_policy_values_map_to_the_operators_names(written, policy):
    parsed = parse_cell(f"%framework=pytorch\n%cleanPolicy={written}\n")
    assert parsed.spec_fields["clean_pod_policy"] == policy


def test_every_ciao_and_distrun_key_lands_in_its_spec_field():
    lines = [
        "%framework=tensorflow",
        "%name=mnist-run",
        "%engine=local",
        "%namespace=team-a",
        "%image=docker.io/tensorflow/tensorflow:2.18.0",
        "%chief=1",
        "%ps=2",
        "%worker=3",
        "%evaluator=1",
        "%cpu=1",
        "%memory=2Gi",
        "%gpu=1",
        "%worker.cpu=4",
        "%worker.memory=8Gi",
        "%worker.gpu=2",
        "%restartPolicy=OnFailure",
        "%backoffLimit=3",
        "%deadline=600",
        "%cleanPolicy=running",
        "%ttl=3600",
        "%queue=default",
        "%priorityClass=high",
        "%env=LEARNING_RATE=0.01",
        "%env=MODE=a=b",
        "%files=train.py,data/b.csv",
        "%files=conf.yaml",
        "train()",
    ]
    cell = "\n".join(lines)
    parsed = parse_cell(cell)
    every_role = {"cpu": "1", "memory": "2Gi", "gpu": 1}
    assert parsed.spec_fields == {
        "framework": "tensorflow",
        "name": "mnist-run",
        "engine": "local",
        "namespace": "team-a",
        "image": "docker.io/tensorflow/tensorflow:2.18.0",
        "roles": {
            "chief": {"replicas": 1, "resources": every_role},
            "ps": {"replicas": 2, "resources": every_role},
            "worker": {"replicas": 3, "resources": {"cpu": "4", "memory": "8Gi", "gpu": 2}},
            "evaluator": {"replicas": 1, "resources": every_role},
        },
        "restart_policy": "OnFailure",
        "backoff_limit": 3,
        "active_deadline_seconds": 600,
        "clean_pod_policy": "Running",
        "ttl_seconds_after_finished": 3600,
        "queue": "default",
        "priority_class": "high",
        "env": {"LEARNING_RATE": "0.01", "MODE": "a=b"},
    }
    assert parsed.file_refs == ["train.py", "data/b.csv", "conf.yaml"]
    assert parsed.code == "\n" * (cell.count("\n")) + "train()"


def test_mpi_launcher_and_pytorch_master_keys():
    assert parse_cell("%framework=mpi\n%launcher=1\n%worker=4\n").spec_fields["roles"] == {
        "launcher": {"replicas": 1},
        "worker": {"replicas": 4},
    }


def test_spaces_around_equals_case_and_separators_in_keys_are_layout():
    parsed = parse_cell(
        "%framework = PyTorch\n  %Worker =  2  \n%restart_policy=onfailure\n"
        "%clean-pod-policy=all\n%env = K = v\n%worker.GPUS=1\n"
    )
    assert parsed.spec_fields == {
        "framework": "pytorch",
        "roles": {"worker": {"replicas": 2, "resources": {"gpu": 1}}},
        "restart_policy": "OnFailure",
        "clean_pod_policy": "All",
        "env": {"K": "v"},
    }


def test_deadline_and_ttl_take_seconds_or_a_unit():
    parsed = parse_cell("%framework=generic\n%deadline=10m\n%ttl=2h\n")
    assert parsed.spec_fields["active_deadline_seconds"] == 600
    assert parsed.spec_fields["ttl_seconds_after_finished"] == 7200


def test_resources_for_every_role_without_counts_go_to_the_framework_default_roles():
    parsed = parse_cell("%framework=pytorch\n%memory=4Gi\n")
    assert parsed.spec_fields["roles"] == {
        "master": {"replicas": 1, "resources": {"memory": "4Gi"}},
        "worker": {"replicas": 1, "resources": {"memory": "4Gi"}},
    }


def test_per_role_resources_override_the_every_role_value():
    parsed = parse_cell("%framework=pytorch\n%master=1\n%worker=2\n%gpu=1\n%master.gpu=0\n")
    assert parsed.spec_fields["roles"] == {
        "master": {"replicas": 1, "resources": {"gpu": 0}},
        "worker": {"replicas": 2, "resources": {"gpu": 1}},
    }


# ---------------------------------------------------------------------------------------------
# The %%distrun magic


def test_distrun_magic_flags_give_the_same_fields_as_ciao_lines():
    magic = (
        "%%distrun --framework tensorflow --name mnist-run --engine local --namespace team-a "
        "--image python:3.11 --chief 1 --ps 2 --workers 3 --evaluator 1 --cpu 1 --memory 2Gi "
        "--gpus 1 --role-resources worker:cpu=4,memory=8Gi,gpu=2 --restart-policy OnFailure "
        "--backoff-limit 3 --deadline 600 --clean-pod-policy Running --ttl 3600 --queue default "
        "--priority-class high --env LEARNING_RATE=0.01 --env 'GREETING=hello world' "
        "--files train.py,data/b.csv --files conf.yaml\ntrain()"
    )
    ciao = (
        "%framework=tensorflow\n%name=mnist-run\n%engine=local\n%namespace=team-a\n"
        "%image=python:3.11\n%chief=1\n%ps=2\n%worker=3\n%evaluator=1\n%cpu=1\n%memory=2Gi\n"
        "%gpu=1\n%worker.cpu=4\n%worker.memory=8Gi\n%worker.gpu=2\n%restartPolicy=OnFailure\n"
        "%backoffLimit=3\n%deadline=600\n%cleanPolicy=running\n%ttl=3600\n%queue=default\n"
        "%priorityClass=high\n%env=LEARNING_RATE=0.01\n%env=GREETING=hello world\n"
        "%files=train.py,data/b.csv\n%files=conf.yaml\ntrain()"
    )
    from_magic, from_ciao = parse_cell(magic), parse_cell(ciao)
    assert from_magic.spec_fields == from_ciao.spec_fields
    assert from_magic.spec_fields["env"]["GREETING"] == "hello world"
    assert from_magic.file_refs == from_ciao.file_refs == ["train.py", "data/b.csv", "conf.yaml"]
    assert from_magic.code == "\ntrain()"


@pytest.mark.parametrize(
    "flags",
    [
        "--worker 2 --master 1 --gpu 1",
        "--workers 2 --masters 1 --gpus 1",
        "--workers=2 --master=1 --gpus=1",
    ],
)
def test_distrun_magic_accepts_singular_plural_and_equals_flags(flags):
    parsed = parse_cell(f"%%distrun --framework pytorch {flags}\n")
    assert parsed.spec_fields["roles"] == {
        "master": {"replicas": 1, "resources": {"gpu": 1}},
        "worker": {"replicas": 2, "resources": {"gpu": 1}},
    }


def test_distrun_env_value_is_taken_literally_from_its_quotes():
    parsed = parse_cell("%%distrun --framework generic --env 'A= padded ' --env B=x=y\n")
    assert parsed.spec_fields["env"] == {"A": " padded ", "B": "x=y"}


def test_distrun_magic_and_ciao_lines_mix():
    parsed = parse_cell("%%distrun --framework pytorch --workers 2\n%image=python:3.11\n%gpu=1\nx")
    assert parsed.spec_fields == {
        "framework": "pytorch",
        "image": "python:3.11",
        "roles": {"worker": {"replicas": 2, "resources": {"gpu": 1}}},
    }
    assert parsed.code == "\n\n\nx"


def test_distrun_magic_after_leading_blank_lines_is_still_the_header():
    parsed = parse_cell("\n  \n%%distrun --framework jax --workers 2\nx")
    assert parsed.spec_fields == {"framework": "jax", "roles": {"worker": {"replicas": 2}}}
    assert parsed.code == "\n  \n\nx"


# ---------------------------------------------------------------------------------------------
# Header boundaries, body preservation, line numbers


def test_a_cell_without_header_is_all_body():
    cell = "%matplotlib inline\n%worker=2\nprint(1)\n"
    parsed = parse_cell(cell)
    assert (parsed.has_header, parsed.spec_fields, parsed.code, parsed.file_refs) == (
        False,
        {},
        cell,
        [],
    )


def test_comments_and_blank_lines_in_the_header_are_kept_and_only_settings_blanked():
    cell = "# job settings\n%framework=generic\n\n   \n# more\n%worker=2\nrun()"
    assert parse_cell(cell).code == "# job settings\n\n\n   \n# more\n\nrun()"


def test_ipython_magics_in_the_body_are_kept_byte_for_byte():
    body = (
        "%matplotlib inline\n%time x = 1\n!pip list\n%env X=1\nfiles = !ls -la\n"
        "%%writefile is not first\n%worker=2\n\tprint('tab')\r\n"
    )
    parsed = parse_cell("%framework=pytorch\n%worker=2\n" + body)
    assert parsed.code == "\n\n" + body
    assert parsed.spec_fields["roles"] == {"worker": {"replicas": 2}}


def test_ipython_env_magic_ends_the_header_so_later_setting_lines_stay_body():
    parsed = parse_cell("%framework=pytorch\n%env X=1\n%worker=2\n")
    assert parsed.code == "\n%env X=1\n%worker=2\n"
    assert "roles" not in parsed.spec_fields


def test_crlf_header_lines_are_read_and_blanked_keeping_the_line_count():
    cell = "%framework=generic\r\n%worker=2\r\nprint(1)\r\n"
    parsed = parse_cell(cell)
    assert parsed.spec_fields == {"framework": "generic", "roles": {"worker": {"replicas": 2}}}
    assert parsed.code == "\n\nprint(1)\r\n"


def test_traceback_line_numbers_of_the_code_match_the_cell():
    cell = (
        "%%distrun --framework generic\n%worker=1\n# comment\n\nx = 1\nraise ValueError('boom')\n"
    )
    code = parse_cell(cell).code
    with pytest.raises(ValueError) as raised:
        exec(compile(code, "<cell>", "exec"), {})  # noqa: S102 - our own test code
    frame = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert frame.lineno == 6 == cell.split("\n").index("raise ValueError('boom')") + 1


# ---------------------------------------------------------------------------------------------
# Errors: one SpecError naming the line and what to write


@pytest.mark.parametrize(
    ("cell", "line", "message"),
    [
        (
            "%framework=pytorch\n%wokers=2\n",
            2,
            "line 2: unknown setting 'wokers'; did you mean 'worker'?",
        ),
        ("%framework=pytorch\n%zzz=2\n", 2, "line 2: unknown setting 'zzz'; the settings are"),
        (
            "%framework=pytorh\n",
            1,
            "line 1: framework 'pytorh' is not a framework (did you mean 'pytorch'?)",
        ),
        ("%framework=pytorch\n%ps=1\n", 2, "line 2: pytorch has no role 'ps'; its roles are"),
        ("%worker=2\n%framework=jax\n%master.cpu=1\n", 3, "line 3: jax has no role 'master'"),
        (
            "%framework=pytorch\n%worker=two\n",
            2,
            "line 2: worker count 'two' is not a whole number; write %worker=2",
        ),
        ("%framework=pytorch\n%worker=-1\n", 2, "worker count '-1' cannot be negative"),
        ("%framework=pytorch\n%worker=99999999\n", 2, "worker count '99999999' is far too large"),
        ("%framework=pytorch\n%worker=1.5\n", 2, "is not a whole number"),
        ("%framework=pytorch\n%worker=²\n", 2, "is not a whole number"),
        (
            "%framework=pytorch\n%memory=lots\n",
            2,
            "line 2: memory 'lots' is not a Kubernetes quantity; write %memory=4Gi",
        ),
        ("%framework=pytorch\n%worker.cpu=fast\n", 2, "write %worker.cpu=2"),
        ("%framework=pytorch\n%worker=2;%cpu=x\n", 2, "write %worker.cpu=2"),
        (
            "%framework=pytorch\n%gpu=one\n",
            2,
            "gpu 'one' is not a whole number like 1, a share of one GPU like 0.5",
        ),
        ("%framework=pytorch\n%restartPolicy=sometimes\n", 2, "is not one of Never, OnFailure"),
        ("%framework=pytorch\n%cleanPolicy=some\n", 2, "is not one of None, Running, All"),
        ("%framework=pytorch\n%deadline=soon\n", 2, "is not a duration"),
        ("%framework=pytorch\n%name=My_Job\n", 2, "name 'My_Job' is not a job name"),
        ("%framework=pytorch\n%image=a b\n", 2, "image 'a b' is not an image reference"),
        (
            "%framework=pytorch\n%worker=2\n%worker=3\n",
            3,
            "line 3: worker is already set on line 2; keep only one of them",
        ),
        ("%%distrun --framework pytorch --workers 2\n%worker=3\n", 2, "already set on line 1"),
        ("%%distrun --framework pytorch --worker 2 --workers 3\n", 1, "already set on line 1"),
        ("%framework=pytorch\n%worker=2;%cpu=1\n%worker.cpu=2\n", 3, "worker.cpu is already set"),
        ("%framework=pytorch\n%env=A=1\n%env=A=2\n", 3, "env A is already set on line 2"),
        ("%framework=pytorch\n%files=a.py\n%files=b.py,a.py\n", 3, "file 'a.py' is already set"),
        ("%framework=pytorch\n%env=1X=1\n", 2, "env '1X=1' is not NAME=value"),
        ("%framework=pytorch\n%env=NOVALUE\n", 2, "write %env=KEY=value"),
        ("%framework=pytorch\n%files=../secret\n", 2, "must be relative and stay inside"),
        ("%framework=pytorch\n%files=a.py,,b.py\n", 2, "has an empty name"),
        ("%framework=pytorch\n%worker=2;memory=1Gi\n", 2, "cannot follow %worker= on its line"),
        (
            "%framework=pytorch\n%worker=2;%image=x\n",
            2,
            "only ;%cpu=, ;%memory=, ;%gpu= and ;%gpuMemory= can",
        ),
        (
            "%worker=2\nprint(1)\n",
            1,
            "line 1: the header does not say which framework to use; add %framework=pytorch",
        ),
        ("%%distrun --workers 2\n", 1, "add --framework pytorch"),
        (
            "%framework=pytorch\n%master=1\n%worker.gpu=1\n",
            3,
            "worker resources are set but the job has no worker replicas; add %worker=N",
        ),
        (
            "%%distrun --framework pytorch --wokers 2\n",
            1,
            "line 1: %%distrun has no option '--wokers'; did you mean '--workers'?",
        ),
        ("%%distrun --framework pytorch --zzz=1\n", 1, "has no option '--zzz'; the options are"),
        ("%%distrun --framework pytorch 2\n", 1, "unexpected argument '2'"),
        ("%%distrun --framework pytorch --workers\n", 1, "expected one argument"),
        ("%%distrun --framework 'pytorch\n", 1, "No closing quotation; close the quote"),
        (
            "%%distrun --framework pytorch --workers -2\n",
            1,
            "cannot be negative; write --workers 2",
        ),
        ("%%distrun --framework pytorch --role-resources cpu=2\n", 1, "does not start with a role"),
        (
            "%%distrun --framework pytorch --role-resources worker:disk=2\n",
            1,
            "'disk=2' is not cpu=, memory=, gpu= or gpuMemory=",
        ),
        (
            "%%distrun --framework pytorch --role-resources worker:memory=x\n",
            1,
            "write --role-resources worker:memory=4Gi",
        ),
        (
            "%framework=pytorch\n%%distrun --workers 2\n",
            2,
            "line 2: %%distrun must be the first line of the cell",
        ),
        ("# note\n%%distrun --framework pytorch\n", 2, "must be the first line"),
        ("%framework=pytorch\nx = '\ud800'\n", 2, "not valid Unicode (a lone surrogate)"),
    ],
)
def test_bad_header_raises_one_spec_error_naming_the_line(cell, line, message):
    with pytest.raises(SpecError) as raised:
        parse_cell(cell)
    assert raised.value.line == line
    assert message in str(raised.value)
    assert str(raised.value).startswith(f"line {line}: ")


def test_ipython_like_setting_name_in_the_header_position_is_an_error_not_body():
    with pytest.raises(SpecError, match="unknown setting 'config'"):
        parse_cell("%framework=pytorch\n%config=1\n")


# ---------------------------------------------------------------------------------------------
# spec_from_cell


def test_spec_from_cell_gives_a_validated_spec_and_the_file_refs():
    spec, files = spec_from_cell(
        "%framework=pytorch\n%master=1\n%worker=2;%gpu=1\n%files=train.py\nimport torch\n"
    )
    assert isinstance(spec, JobSpec)
    assert spec.replica_names() == ["master-0", "worker-0", "worker-1"]
    assert spec.roles["worker"].resources.gpu == 1
    assert spec.code == "\n\n\n\nimport torch\n"
    assert files == ["train.py"]


def test_overrides_win_and_roles_merge_per_role():
    spec, _ = spec_from_cell(
        "%framework=pytorch\n%master=1;%cpu=1\n%worker=2;%cpu=2;%memory=4Gi\n%name=from-cell\n"
        "%env=A=cell\n%env=B=cell\n",
        overrides={
            "name": "from-form",
            "roles": {"worker": {"replicas": 4, "resources": {"cpu": "3"}}},
            "env": {"B": "form"},
        },
    )
    assert spec.name == "from-form"
    assert spec.roles["master"].replicas == 1
    assert spec.roles["worker"].replicas == 4
    assert (spec.roles["worker"].resources.cpu, spec.roles["worker"].resources.memory) == (
        "3",
        "4Gi",
    )
    assert spec.env == {"A": "cell", "B": "form"}


def test_overrides_framework_serves_a_header_without_one():
    spec, _ = spec_from_cell("%worker=3\nx", overrides={"framework": "jax"})
    assert (spec.framework, spec.roles["worker"].replicas) == ("jax", 3)


def test_a_cell_without_header_takes_everything_from_overrides():
    spec, _ = spec_from_cell("print(1)", overrides={"framework": "generic"})
    assert (spec.framework, spec.code) == ("generic", "print(1)")


def test_spec_from_cell_without_header_or_framework_says_to_add_one():
    with pytest.raises(SpecError, match="line 1: the cell does not say how to run it"):
        spec_from_cell("print(1)")


@pytest.mark.parametrize(
    ("cell", "line", "message"),
    [
        ("%framework=pytorch\n%worker=100\n", 2, "roles.worker.replicas must be between 0 and 64"),
        ("%framework=pytorch\n%master=2\n", 2, "pytorch allows at most 1 master replica(s), not 2"),
        ("%framework=generic\n%worker=0\n", 2, "generic needs at least 1 worker replica(s)"),
        ("%framework=mpi\n%launcher=0\n", 2, "mpi needs at least 1 launcher replica(s)"),
        ("%framework=pytorch\n%worker=1\n%gpu=20\n", 3, "resources.gpu must be between 0 and 16"),
        ("%framework=pytorch\n%backoffLimit=500\n", 2, "backoff_limit must be between 0 and 100"),
        ("%framework=pytorch\n%deadline=0\n", 2, "active_deadline_seconds must be between"),
    ],
)
def test_whole_spec_errors_carry_the_header_line_the_value_came_from(cell, line, message):
    with pytest.raises(SpecError) as raised:
        spec_from_cell(cell)
    assert message in str(raised.value)
    assert raised.value.line == line


def test_an_error_in_an_override_carries_no_header_line():
    with pytest.raises(SpecError) as raised:
        spec_from_cell("%framework=pytorch\n%name=fine\n", overrides={"name": "Not Fine"})
    assert raised.value.line is None
    assert raised.value.field == "name"


def test_unknown_framework_in_overrides_is_named_as_such():
    with pytest.raises(SpecError, match="unknown framework 'tf'") as raised:
        spec_from_cell("%worker=2\n", overrides={"framework": "tf"})
    assert raised.value.line is None


def test_too_many_replicas_in_total_is_a_limit():
    with pytest.raises(LimitExceeded, match="over the limit of 4"):
        spec_from_cell("%framework=pytorch\n%master=1\n%worker=4\n", limits=Limits(max_replicas=4))


def test_a_cell_over_the_payload_limit_is_a_limit_before_parsing():
    cell = "%framework=generic\n" + "x = 1\n" * 100
    with pytest.raises(LimitExceeded, match="over the payload limit of 100 bytes"):
        spec_from_cell(cell, limits=Limits(max_payload_bytes=100))


def test_overrides_that_are_not_an_object_are_a_spec_error():
    with pytest.raises(SpecError, match="overrides must be an object"):
        spec_from_cell("%framework=generic\n", overrides=["framework"])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# render_header


def test_render_header_writes_ciao_lines_in_a_stable_order():
    fields = {
        "framework": "pytorch",
        "roles": {
            "worker": {"replicas": 2, "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1}},
            "master": {"replicas": 1},
        },
        "clean_pod_policy": "All",
        "active_deadline_seconds": 600,
        "env": {"LR": "0.1"},
        "image": None,
    }
    text = render_header(fields, ["train.py", "data/x.csv"])
    assert text == (
        "%framework=pytorch\n%master=1\n%worker=2;%cpu=2;%memory=4Gi;%gpu=1\n%deadline=600\n"
        "%cleanPolicy=all\n%env=LR=0.1\n%files=train.py,data/x.csv\n"
    )
    parsed = parse_cell(text + "train()")
    assert {k: v for k, v in fields.items() if v is not None} == parsed.spec_fields
    assert parsed.file_refs == ["train.py", "data/x.csv"]


def test_render_header_quotes_padded_env_values_on_a_distrun_line():
    text = render_header({"framework": "generic", "env": {"A": " x ", "B": "y"}})
    assert text == "%%distrun --env 'A= x '\n%framework=generic\n%env=B=y\n"
    assert parse_cell(text).spec_fields["env"] == {"A": " x ", "B": "y"}


def test_render_header_names_shipped_files_by_their_paths_and_ignores_code():
    text = render_header({"framework": "generic", "code": "x", "files": {"a.py": "eA=="}})
    assert text == "%framework=generic\n%files=a.py\n"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"framework": "generic", "env": {"A": "two\nlines"}}, "cannot be written in a header"),
        ({"framework": "generic", "name": "x\n%image=evil"}, "cannot be written in a header"),
        ({"framework": "generic", "backoff_limit": True}, "cannot be written in a header"),
        ({"framework": "generic", "roles": {"boss": {"replicas": 1}}}, "roles must map role"),
        ({"framework": "generic", "roles": {"worker": {"replicas": -1}}}, "cannot be written"),
        ({"framework": "generic", "roles": {"worker": {"count": 1}}}, "cannot render role"),
        ({"framework": "generic", "colour": "blue"}, "cannot render unknown field(s) colour"),
    ],
)
def test_render_header_refuses_what_a_header_cannot_say(fields, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        render_header(fields)


@pytest.mark.parametrize("path", ["a,b.py", " a.py", "../x"])
def test_render_header_refuses_file_names_a_header_cannot_carry(path):
    with pytest.raises(SpecError):
        render_header({"framework": "generic"}, [path])


# ---------------------------------------------------------------------------------------------
# needs_ipython


@pytest.mark.parametrize(
    "code",
    [
        "%matplotlib inline\nx = 1",
        "%%time\nx = 1",
        "!pip list",
        "  !ls",
        "files = !ls",
        "a, b = %sx echo hi",
        "x = 1\n%time y = 2",
        "len?",
        "??len",
        "await something()",
        "\n\n%env X=1\nprint(1)",
    ],
)
def test_ipython_syntax_needs_ipython(code):
    assert needs_ipython(code)


@pytest.mark.parametrize(
    "code",
    [
        "",
        "x = 1\nprint(x % 2)",
        "s = '''\n%matplotlib inline\n!ls\n'''",
        "x %= 3",
        "def f(:\n    pass",  # broken Python is Python's to report
        "async def f():\n    await g()",
        "x = 'a\\d'",  # a SyntaxWarning, not IPython
    ],
)
def test_plain_or_broken_python_does_not_need_ipython(code):
    assert not needs_ipython(code)


def test_needs_ipython_on_the_parsed_body_of_a_cell_with_body_magics():
    parsed = parse_cell("%framework=generic\n%worker=1\n!nvidia-smi\nprint(1)\n")
    assert needs_ipython(parsed.code)
    assert not needs_ipython(parse_cell("%framework=generic\nprint(1)\n").code)


def test_deeply_nested_code_is_left_to_python_without_crashing():
    assert needs_ipython("(" * 10_000 + "1" + ")" * 10_000) is False


def test_a_framework_override_that_is_not_a_string_is_a_spec_error():
    with pytest.raises(SpecError, match="framework must be a string"):
        spec_from_cell("%worker=2\n", overrides={"framework": ["pytorch"]})


def test_startup_timeout_is_set_by_either_syntax():
    ciao, _ = spec_from_cell("%framework=generic\n%startupTimeout=2m\nprint(1)\n")
    magic, _ = spec_from_cell("%%distrun --framework generic --startup-timeout 120\nprint(1)\n")
    assert ciao.startup_timeout_seconds == magic.startup_timeout_seconds == 120


def test_restart_and_max_restarts_are_header_settings() -> None:
    cell = "%%distrun\n%framework=pytorch\n%restart=job\n%maxRestarts=3\nprint(1)\n"
    parsed = parse_cell(cell)
    assert (parsed.spec_fields["restart"], parsed.spec_fields["max_restarts"]) == ("job", 3)
    assert "%restart=job" in render_header({"restart": "job", "max_restarts": 3})
    with pytest.raises(SpecError, match="is not one of job, replica"):
        parse_cell("%%distrun\n%restart=everything\nprint(1)\n")
