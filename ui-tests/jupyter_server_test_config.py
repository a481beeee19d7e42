"""JupyterLab for the browser tests: galata's test setup, plus a token, XSRF checks kept on,
this repository's build of the extension, and the distrun server extension when present."""

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from jupyter_core.paths import jupyter_path
from jupyterlab.galata import configure_jupyter_server

REPO = Path(__file__).resolve().parent.parent
BUILT_EXTENSION = REPO / "server_ext" / "distrun" / "labextension"

configure_jupyter_server(c)  # noqa: F821 (c is the config object jupyter passes in)

# The port and token its launcher chose (playwright.config.js, benchmarks/browser): no default,
# so that no two checkouts share one. If the port is taken the server stops, rather than moving
# to the next port while the launcher polls the old one (and finds another checkout's server).
for _variable in ("DISTRUN_UI_PORT", "DISTRUN_UI_TOKEN"):
    if not os.environ.get(_variable):
        sys.exit(
            f"{_variable} is not set: start this server through ui-tests (jlpm playwright test)"
        )
c.ServerApp.port = int(os.environ["DISTRUN_UI_PORT"])  # noqa: F821
c.ServerApp.port_retries = 0  # noqa: F821
c.ServerApp.ip = "127.0.0.1"  # noqa: F821
c.ServerApp.allow_root = True  # noqa: F821
c.IdentityProvider.token = os.environ["DISTRUN_UI_TOKEN"]  # noqa: F821
c.ServerApp.disable_check_xsrf = False  # noqa: F821
# This server's own jobs and logs: tests and screenshots never see another server's jobs.
c.DistrunApp.state_dir = tempfile.mkdtemp(prefix="distrun-ui-state-")  # noqa: F821
# benchmarks/browser --nice, --waiting-interpreters: the local engine's niceness for jobs (its
# default is 10) and how many replica interpreters it starts ahead (its default is 1).
_bench_options = {
    option: int(os.environ[variable])
    for option, variable in (
        ("nice", "DISTRUN_BENCH_NICE"),
        ("waiting_interpreters", "DISTRUN_BENCH_WAITING_INTERPRETERS"),
    )
    if os.environ.get(variable)
}
if _bench_options:
    c.DistrunApp.engines = {  # noqa: F821
        "local": {"class": "distrun.engines.local.LocalEngine", **_bench_options}
    }


def _installed(name: str) -> bool:
    return any((Path(p) / name / "package.json").exists() for p in jupyter_path("labextensions"))


# Serve the repository's build (`jlpm build`) unless the package is pip-installed already.
if not _installed("@distrun/labextension"):
    if not (BUILT_EXTENSION / "package.json").exists():
        sys.exit(f"build the extension first (jlpm build:prod): {BUILT_EXTENSION} is missing")
    extensions = Path(tempfile.mkdtemp(prefix="distrun-labextensions-"))
    (extensions / "@distrun").mkdir()
    (extensions / "@distrun" / "labextension").symlink_to(BUILT_EXTENSION)
    c.LabServerApp.extra_labextensions_path = [  # noqa: F821
        c.LabServerApp.extra_labextensions_path,  # noqa: F821 (galata's helper extension)
        str(extensions),
    ]

# The server extension, from the installed package or from this checkout.
if importlib.util.find_spec("distrun") is None:
    sys.path.insert(0, str(REPO / "server_ext"))
if importlib.util.find_spec("distrun.server.app") is not None:
    c.ServerApp.jpserver_extensions = {"distrun": True}  # noqa: F821
