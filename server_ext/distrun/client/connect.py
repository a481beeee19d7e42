"""Which backend a command talks to: a server when one is named, else the local engine."""

import os
from collections.abc import Mapping
from pathlib import Path

from distrun.client.base import Client
from distrun.client.engine_client import EngineClient
from distrun.client.server_client import ServerClient
from distrun.core.errors import SpecError


def client_from_env(
    url: str | None = None,
    token: str | None = None,
    state_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    token_file: Path | None = None,
) -> Client:
    """A server client when a URL is given or in the environment, else the local engine. The
    token: `token`, else `token_file`'s content, else DISTRUN_TOKEN, DISTRUN_TOKEN_FILE's
    content, JUPYTER_TOKEN."""
    env = os.environ if environ is None else environ
    url = url or env.get("DISTRUN_URL") or env.get("JUPYTER_SERVER_URL")
    if url:
        return ServerClient(url, token or _token_from(env, token_file))
    return EngineClient(state_dir=state_dir)


def _token_from(env: Mapping[str, str], token_file: Path | None) -> str | None:
    if token_file is not None:
        return read_token_file(token_file)
    if env.get("DISTRUN_TOKEN"):
        return env["DISTRUN_TOKEN"]
    if env.get("DISTRUN_TOKEN_FILE"):
        return read_token_file(Path(env["DISTRUN_TOKEN_FILE"]))
    return env.get("JUPYTER_TOKEN")


def read_token_file(path: Path) -> str:
    """The token a file holds (its first line, without surrounding blanks)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "it is not text"
        raise SpecError(f"cannot read the token file {str(path)!r}: {reason}") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise SpecError(f"the token file {str(path)!r} is empty; write the server's token in it")
    return token
