"""The jupyter_server extension: builds the configured engines and registers the handlers.

Engines are configured by name (see engines/registry.py). `engine_factories` (name -> callable(app) -> Engine)
wins over `engines`: it is the seam tests use to inject an in-memory engine.
"""

import asyncio
import gc
import getpass
import os
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.auth.identity import (
    IdentityProvider,
    LegacyIdentityProvider,
    PasswordIdentityProvider,
    User,
)
from jupyter_server.extension.application import ExtensionApp
from tornado.websocket import WebSocketHandler
from traitlets import Bool, CaselessStrEnum, Dict, Float, Int, Unicode, default

from distrun.core.spec import Limits
from distrun.engines.local import LocalEngine
from distrun.engines.protocol import Engine
from distrun.engines.registry import EngineRegistry, build_engine
from distrun.server.heap_trim import trim_heap_every
from distrun.server.metric_reads import MetricReads
from distrun.server.routes import routes
from distrun.server.stream_tickets import StreamTickets
from distrun.server.tensorboard import TensorBoards

EngineFactory = Callable[["DistrunApp"], Engine]

# jupyter_server's own identity providers invent an anonymous user per browser (and per
# cookie-less token request), so on a single-user server they cannot name a job's owner.
_ANONYMOUS_IDENTITY_PROVIDERS = (IdentityProvider, PasswordIdentityProvider, LegacyIdentityProvider)


class DistrunApp(ExtensionApp):
    name = "distrun"
    description = "Run notebook cells as distributed training jobs and stream their logs"

    default_engine = Unicode("local", config=True, help="The engine a job runs on by default.")
    engines = Dict(
        default_value={"local": {"class": "distrun.engines.local.LocalEngine"}},
        config=True,
        help=(
            "Engines by name: {'local': {'class': 'distrun.engines.local.LocalEngine', "
            "'kwargs': {...}}}. state_dir and limits are passed when the class takes them."
        ),
    )
    engine_factories = Dict(
        default_value={},
        config=True,
        help="Engines by name as callables(app) -> Engine; these win over `engines`.",
    )
    state_dir = Unicode(config=True, help="Where engines keep jobs and logs on this machine.")
    owner_source = CaselessStrEnum(
        ["auto", "username", "os_user"],
        default_value="auto",
        config=True,
        help=(
            "Who owns a job. 'username': the authenticated user's name (JupyterHub). "
            "'os_user': the OS user running the server, for every authenticated request (a "
            "single-user server, whose default identity provider invents anonymous names; the "
            "distrun CLI uses the same owner). 'auto': 'username' on a JupyterHub single-user "
            "server (as an extension or not) and with any identity provider but "
            "jupyter_server's own, 'os_user' otherwise."
        ),
    )
    max_replicas = Int(Limits.max_replicas, config=True, help="Most replicas in one job.")
    max_gpus_per_replica = Int(Limits.max_gpus_per_replica, config=True)
    max_jobs_per_user = Int(
        Limits.max_jobs_per_user, config=True, help="Unfinished jobs a user may have."
    )
    max_payload_bytes = Int(
        Limits.max_payload_bytes, config=True, help="Most bytes of code plus shipped files."
    )
    max_log_line_bytes = Int(Limits.max_log_line_bytes, config=True)
    log_stream_compression = Bool(
        False,
        config=True,
        help=(
            "Offer permessage-deflate on the log websocket (browsers accept it): training "
            "logs cross the network about 6x smaller, for users far from the server, at the "
            "cost of server CPU per line (benchmarks/bench_log_stream.py --deflate measures "
            "it; docs/performance.md)."
        ),
    )
    max_streams_per_user = Int(
        64,
        config=True,
        help=(
            "Log websockets one user may hold open at once (every cell output, log viewer "
            "and CLI follow is one); one more is closed with code 4429 and a message."
        ),
    )
    local_engine_on_shared_server = Bool(
        False,
        config=True,
        help=(
            "Let the local engine run jobs on a server several users share (owner_source "
            "resolves to 'username' outside a JupyterHub single-user server). Its jobs run as "
            "this server's own OS user, with one state directory and the server's environment "
            "and files: every user's job can read every other user's code and the server's "
            "credentials. Only for one team whose members trust each other; off, the local "
            "engine refuses their jobs with a message and GET /distrun/engines says why."
        ),
    )
    freeze_startup_heap = Bool(
        True,
        config=True,
        help=(
            "Once the server runs, move the objects its start-up made (they live as long as "
            "the server) out of the garbage collector's sight with gc.freeze(). Otherwise "
            "every full collection scans them all, ~250k objects, blocking the event loop "
            "for 100-200 ms while logs stream (benchmarks/bench_soak.py)."
        ),
    )

    young_collection_threshold = Int(
        20_000,
        config=True,
        help=(
            "Collect the garbage collector's youngest generation once this many more objects "
            "were made than freed (Python's default is 700; 0 keeps the process's setting). "
            "A server following many replicas makes thousands of short-lived objects a "
            "second: collected every 700, many are caught alive and promoted, and the "
            "promoted ones bring full collections of the whole heap that block the event "
            "loop for hundreds of milliseconds (benchmarks/bench_kube_soak.py)."
        ),
    )
    trim_heap_interval = Float(
        30.0,
        config=True,
        help=(
            "Every this many seconds, give the C heap's free pages back to the system "
            "(glibc's malloc_trim, on a worker thread; nothing where the C library has none). "
            "Catching up on long logs leaves much of the memory those reads took resident "
            "otherwise: 0.34 MiB a connection after a 1 MiB history (docs/performance.md). "
            "0 turns it off."
        ),
    )

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "distrun")

    @property
    def limits(self) -> Limits:
        return Limits(
            max_replicas=self.max_replicas,
            max_gpus_per_replica=self.max_gpus_per_replica,
            max_payload_bytes=self.max_payload_bytes,
            max_jobs_per_user=self.max_jobs_per_user,
            max_log_line_bytes=self.max_log_line_bytes,
        )

    @property
    def max_body_bytes(self) -> int:
        """The largest request body read: base64 grows the payload by 4/3 and JSON escaping
        can grow code further, so allow twice the payload plus room for the other fields."""
        return 2 * self.max_payload_bytes + 64 * 1024

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._registry: EngineRegistry | None = None
        # Open log websockets: follower task -> its handler.
        self.streams: dict[asyncio.Task[None], WebSocketHandler] = {}
        self.metric_reads = MetricReads()  # what jobs' logs reported, read on per request
        self._token_file: Path | None = None
        self.tensorboards = TensorBoards()  # started on demand, one a job
        self.stream_tickets = StreamTickets()  # log streams opened before their job exists
        self._heap_trims: asyncio.Task[None] | None = None

    @property
    def registry(self) -> EngineRegistry:
        if self._registry is None:
            raise RuntimeError("the distrun extension is not initialized")
        return self._registry

    def initialize_settings(self) -> None:
        self._registry = EngineRegistry(self._build_engines(), self.default_engine)
        self.log.info(
            "distrun engines: %s (default %s)", self.registry.names(), self.default_engine
        )

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes())

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Runs once the server's event loop does, after every extension has loaded."""
        self._token_file = point_kernels_here(serverapp, os.environ)
        for engine in self._registry.all() if self._registry is not None else []:
            await self._warm_up(engine)
        if self.freeze_startup_heap:
            gc.collect()  # start-up's garbage goes now, not into the permanent generation
            gc.freeze()
        if self.young_collection_threshold > 0:
            gc.set_threshold(self.young_collection_threshold, *gc.get_threshold()[1:])
        if self.trim_heap_interval > 0:
            self._heap_trims = asyncio.create_task(trim_heap_every(self.trim_heap_interval))

    async def _warm_up(self, engine: Any) -> None:
        """The local engine's next supervisor, started before the first job asks for it. Only
        an optimisation: a failure is logged, and the start-up (the heap's freeze) goes on."""
        if not isinstance(engine, LocalEngine):
            return
        try:
            await engine.prepare()
        except Exception:
            self.log.exception(
                "distrun: could not start the %s engine's next supervisor", engine.name
            )

    async def stop_extension(self) -> None:
        if self._token_file is not None:
            self._token_file.unlink(missing_ok=True)
            os.environ.pop("DISTRUN_URL", None)
            os.environ.pop("DISTRUN_TOKEN_FILE", None)
        tasks = list(self.streams)
        if self._heap_trims is not None:
            tasks.append(self._heap_trims)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.tensorboards.stop_all()
        if self._registry is not None:  # None when the extension failed to load
            await self._registry.close()

    def owner_of(self, user: User) -> str:
        if self._owner_source() == "os_user":
            return getpass.getuser()
        return user.username

    def track(self, task: "asyncio.Task[None]", handler: WebSocketHandler) -> None:
        """Keep a websocket's follower task until it ends, so a server stop can cancel it."""
        self.streams[task] = handler
        task.add_done_callback(self._forget_stream)

    def streams_of(self, owner: str) -> int:
        """How many log websockets `owner` holds open (closed ones whose follower is still
        letting go count no more: a viewer that left has given its place back)."""
        return sum(
            getattr(handler, "owner", None) == owner and not getattr(handler, "client_gone", False)
            for handler in self.streams.values()
        )

    def _forget_stream(self, task: "asyncio.Task[None]") -> None:
        self.streams.pop(task, None)

    def one_persons_server(self) -> bool:
        """Whether one person uses this server (a hub's single-user server, or a server
        whose identity is the OS user), rather than several users sharing it."""
        return self._owner_source() != "username" or is_hub_singleuser(os.environ)

    def refusal_of(self, engine: Any) -> str | None:
        """Why `engine` takes no job on this server, or None."""
        if not getattr(engine, "runs_as_server_user", False) or self.local_engine_on_shared_server:
            return None
        if self.one_persons_server():
            return None
        return (
            f"the {engine.name} engine is off on this server: several users share it, and the "
            f"{engine.name} engine runs every job as the server's own OS user, where other "
            "users' jobs could read yours. Choose a cluster engine (%engine=NAME; "
            "GET /distrun/engines lists them), or have the administrator set "
            "c.DistrunApp.local_engine_on_shared_server = True if every user trusts every other"
        )

    def _owner_source(self) -> str:
        if self.owner_source != "auto":
            return str(self.owner_source)
        if is_hub_singleuser(os.environ):
            return "username"
        provider = type(self.serverapp.identity_provider) if self.serverapp else None
        return "os_user" if provider in _ANONYMOUS_IDENTITY_PROVIDERS else "username"

    def _build_engines(self) -> dict[str, Engine]:
        engines: dict[str, Engine] = {}
        for name, entry in self.engines.items():
            if name not in self.engine_factories:
                engines[name] = build_engine(name, entry, Path(self.state_dir), self.limits)
        for name, factory in self.engine_factories.items():
            engines[name] = factory(self)
        return engines


def is_hub_singleuser(environ: Mapping[str, str]) -> bool:
    """A JupyterHub single-user server, whatever its mode: JupyterHub gives every one it spawns
    its user and API token. Without the single-user extension (JUPYTERHUB_SINGLEUSER_EXTENSION=0)
    the identity provider is jupyter_server's own, but the hub still authenticates each request
    as a hub user: that user, not the OS account every KubeSpawner pod shares, owns the jobs."""
    return bool(environ.get("JUPYTERHUB_USER") and environ.get("JUPYTERHUB_API_TOKEN"))


def point_kernels_here(serverapp: Any, environ: MutableMapping[str, str]) -> Path | None:
    """Has the kernels this server starts send their jobs here (the kernel magic reads
    DISTRUN_URL and DISTRUN_TOKEN_FILE): its URL, and its token in a file only its user can
    read, named by path (a kernel's environment holds no secret). Kernels inherit the server's
    environment; remote (gateway) kernels do not, and one already pointed elsewhere is left so.
    Returns the token file, removed when the server stops; None when nothing was set."""
    token = getattr(getattr(serverapp, "identity_provider", None), "token", "")
    if "DISTRUN_URL" in environ or not token:
        return None
    runtime = Path(serverapp.runtime_dir)
    runtime.mkdir(parents=True, exist_ok=True)
    path = runtime / f"distrun-token-{os.getpid()}"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(token + "\n")
    environ["DISTRUN_URL"] = serverapp.connection_url
    environ["DISTRUN_TOKEN_FILE"] = str(path)
    return path
