"""Which backend a command talks to: a server when one is named, else the local engine."""

import os
from pathlib import Path

from distrun.client.base import Client
from distrun.client.engine_client import EngineClient
from distrun.client.server_client import ServerClient


def client_from_env(
    url: str | None = None,
    token: str | None = None,
    state_dir: Path | None = None,
    environ: dict[str, str] | None = None,
) -> Client:
    """A server client when a URL is given or in the environment, else the local engine."""
    env = os.environ if environ is None else environ
    url = url or env.get("DISTRUN_URL") or env.get("JUPYTER_SERVER_URL")
    if url:
        token = token or env.get("DISTRUN_TOKEN") or env.get("JUPYTER_TOKEN")
        return ServerClient(url, token)
    return EngineClient(state_dir=state_dir)
