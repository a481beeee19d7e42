"""Argument parsing of the `distrun` command and how flags become a job spec."""

import argparse
from pathlib import Path
from typing import Any

import pytest

from distrun.client.cli import apply_resources, build_parser, overrides_from_args
from distrun.client.connect import client_from_env
from distrun.client.engine_client import EngineClient
from distrun.client.server_client import ServerClient
from distrun.core.errors import SpecError
from distrun.core.spec import JobSpec, Limits


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_run_flags_become_spec_overrides_with_plural_and_singular_role_flags() -> None:
    args = parse(
        "run", "train.py", "--framework", "pytorch", "--workers", "3", "--master", "1",
        "--image", "python:3.11", "--name", "mnist", "--env", "A=1", "--env", "B=x=y",
        "--restart-policy", "OnFailure", "--backoff-limit", "2", "--deadline", "600",
        "--clean-pod-policy", "All", "--queue", "q", "--priority-class", "high",
        "--engine", "local", "--namespace", "team-a",
    )  # fmt: skip
    assert args.file == "train.py"
    assert overrides_from_args(args) == {
        "framework": "pytorch",
        "image": "python:3.11",
        "name": "mnist",
        "engine": "local",
        "namespace": "team-a",
        "restart_policy": "OnFailure",
        "clean_pod_policy": "All",
        "queue": "q",
        "priority_class": "high",
        "roles": {"worker": {"replicas": 3}, "master": {"replicas": 1}},
        "env": {"A": "1", "B": "x=y"},
        "backoff_limit": 2,
        "active_deadline_seconds": 600,
    }


def test_singular_worker_flag_and_ps_flag_set_role_counts() -> None:
    args = parse("submit", "cell.txt", "--worker", "2", "--ps", "1", "--chiefs", "1")
    assert overrides_from_args(args)["roles"] == {
        "worker": {"replicas": 2},
        "ps": {"replicas": 1},
        "chief": {"replicas": 1},
    }


def test_no_flags_give_no_overrides() -> None:
    assert overrides_from_args(parse("run", "train.py")) == {}


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "f.py", "--workers", "two"],
        ["run", "f.py", "--workers", "-1"],
        ["run", "f.py", "--env", "NOEQUALS"],
        ["run", "f.py", "--role-resources", "worker"],
        ["run", "f.py", "--role-resources", "worker:disk=1"],
        ["run", "f.py", "--wokers", "2"],
        ["logs"],
        ["frobnicate"],
    ],
)
def test_bad_arguments_exit_with_code_2_and_a_message(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: distrun") and "error: " in err


def test_bad_argument_message_names_the_problem(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "f.py", "--workers", "two"])
    err = capsys.readouterr().err
    assert "distrun run: error:" in err and "'two' is not a whole number" in err


def test_backend_flags_work_before_and_after_the_subcommand() -> None:
    before = parse("--url", "http://h:1/", "--token", "t", "ls")
    after = parse("ls", "--url", "http://h:1/", "--token", "t")
    neither = parse("ls")
    assert (before.url, before.token) == ("http://h:1/", "t")
    assert (after.url, after.token) == ("http://h:1/", "t")
    assert (neither.url, neither.token, neither.state_dir) == (None, None, None)


def test_logs_flags() -> None:
    args = parse("logs", "job-ab12c", "-f", "--replica", "worker-0", "--replica", "master-0",
                 "--tail", "5")  # fmt: skip
    assert (args.job_id, args.follow, args.replica, args.tail) == (
        "job-ab12c",
        True,
        ["worker-0", "master-0"],
        5,
    )


def _spec() -> JobSpec:
    return JobSpec.from_dict(
        {"framework": "pytorch", "code": "", "roles": {"master": {"replicas": 1},
         "worker": {"replicas": 2, "resources": {"cpu": "1", "memory": "1Gi"}}}}
    )  # fmt: skip


def test_common_resources_apply_to_every_role_and_role_resources_win() -> None:
    args = parse("run", "f.py", "--cpu", "2", "--gpus", "1",
                 "--role-resources", "worker:cpu=4,gpu=2")  # fmt: skip
    spec = apply_resources(_spec(), args, Limits())
    master, worker = spec.roles["master"].resources, spec.roles["worker"].resources
    assert (master.cpu, master.memory, master.gpu) == ("2", None, 1)
    assert (worker.cpu, worker.memory, worker.gpu) == ("4", "1Gi", 2)


def test_role_resources_for_a_role_the_job_lacks_is_a_spec_error() -> None:
    args = parse("run", "f.py", "--role-resources", "ps:cpu=1")
    with pytest.raises(SpecError, match="names 'ps', but the job's roles are master, worker"):
        apply_resources(_spec(), args, Limits())


def test_resources_are_revalidated_after_applying_them() -> None:
    args = parse("run", "f.py", "--memory", "lots")
    with pytest.raises(SpecError, match="memory 'lots' is not a Kubernetes quantity"):
        apply_resources(_spec(), args, Limits())


def test_backend_is_the_server_when_a_url_is_given_or_in_the_environment() -> None:
    flagged = client_from_env("http://h:1/base", "tok", environ={})
    assert isinstance(flagged, ServerClient)
    assert (flagged.base_url, flagged.token) == ("http://h:1/base/", "tok")
    from_env = client_from_env(environ={"DISTRUN_URL": "http://a:2/", "DISTRUN_TOKEN": "x"})
    assert isinstance(from_env, ServerClient) and from_env.token == "x"
    jupyter_env = client_from_env(
        environ={"JUPYTER_SERVER_URL": "http://b:3/", "JUPYTER_TOKEN": "y"}
    )
    assert isinstance(jupyter_env, ServerClient)
    assert (jupyter_env.base_url, jupyter_env.token) == ("http://b:3/", "y")


def test_the_token_comes_from_the_flag_a_token_file_or_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  from-file \n")
    url = {"DISTRUN_URL": "http://a:2/"}

    def token(environ: dict[str, str], **kwargs: Any) -> str | None:
        client = client_from_env(environ={**url, **environ}, **kwargs)
        assert isinstance(client, ServerClient)
        return client.token

    assert token({}, token_file=token_file) == "from-file"
    assert token({"DISTRUN_TOKEN": "env"}, token_file=token_file) == "from-file"
    assert token({"DISTRUN_TOKEN": "env", "DISTRUN_TOKEN_FILE": str(token_file)}) == "env"
    assert token({"DISTRUN_TOKEN_FILE": str(token_file), "JUPYTER_TOKEN": "j"}) == "from-file"
    assert token({"JUPYTER_TOKEN": "j"}) == "j"
    assert token({}, token="flag", token_file=token_file) == "flag"


def test_a_missing_or_empty_token_file_is_a_clear_error(tmp_path: Path) -> None:
    environ = {"DISTRUN_URL": "http://a:2/"}
    with pytest.raises(SpecError, match="cannot read the token file .*No such file"):
        client_from_env(environ=environ, token_file=tmp_path / "nope")
    (tmp_path / "empty").write_text("\n \n")
    with pytest.raises(SpecError, match="is empty; write the server's token in it"):
        client_from_env(environ={**environ, "DISTRUN_TOKEN_FILE": str(tmp_path / "empty")})


def test_backend_is_the_local_engine_without_a_url_even_if_a_token_is_set(
    tmp_path: Path,
) -> None:
    client = client_from_env(state_dir=tmp_path, environ={"JUPYTER_TOKEN": "y"})
    assert isinstance(client, EngineClient)
    assert client.state_dir == tmp_path


def test_a_malformed_server_url_is_a_clear_error() -> None:
    from distrun.client.base import ClientError

    with pytest.raises(ClientError, match="is not valid; write http://host:port/"):
        ServerClient("localhost:8888")
