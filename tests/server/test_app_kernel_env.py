"""The server points the kernels it starts at itself, for the kernel magic: its URL in
DISTRUN_URL and its token in a file only its user reads (DISTRUN_TOKEN_FILE), never the token
itself in an environment; a kernel already pointed elsewhere is left so."""

import stat
from pathlib import Path
from types import SimpleNamespace

from distrun.client.connect import client_from_env
from distrun.client.server_client import ServerClient
from distrun.server.app import point_kernels_here


def serverapp(tmp_path: Path, token: str = "s3cret") -> SimpleNamespace:
    return SimpleNamespace(
        identity_provider=SimpleNamespace(token=token),
        runtime_dir=str(tmp_path / "runtime"),
        connection_url="http://127.0.0.1:8888/base/",
    )


def test_kernels_get_the_url_and_a_private_token_file(tmp_path: Path) -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    path = point_kernels_here(serverapp(tmp_path), env)
    assert path is not None and env["DISTRUN_TOKEN_FILE"] == str(path)
    assert env["DISTRUN_URL"] == "http://127.0.0.1:8888/base/"
    assert "s3cret" not in "".join(env.values())
    assert path.read_text() == "s3cret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    client = client_from_env(environ=env)
    assert isinstance(client, ServerClient)


def test_a_kernel_pointed_elsewhere_or_a_server_without_a_token_changes_nothing(
    tmp_path: Path,
) -> None:
    env = {"DISTRUN_URL": "http://elsewhere/"}
    assert point_kernels_here(serverapp(tmp_path), env) is None
    assert env == {"DISTRUN_URL": "http://elsewhere/"}
    empty: dict[str, str] = {}
    assert point_kernels_here(serverapp(tmp_path, token=""), empty) is None
    assert empty == {}
