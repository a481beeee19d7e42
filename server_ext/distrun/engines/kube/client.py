"""The few Kubernetes API calls the engines make, async (`kubernetes_asyncio`), on plain dicts.

Responses are read raw and parsed as JSON, so every object stays the API's own camelCase dict
(the same shape the manifest builders produce), and watches and log streams are read in chunks
without a line-length ceiling. Failures become domain errors with the API's message.
"""

import asyncio
import asyncio.selector_events
import contextlib
import copy
import ctypes
import functools
import hashlib
import json
import os
import re
import sys
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from distrun.core.errors import Conflict, DistrunError, EngineError, Forbidden, NotFound, SpecError
from distrun.engines.kube.h2_logs import LogStreams, NoHttp2, endpoint_from, log_path

Obj = dict[str, Any]
_NOT_DNS_RE = re.compile(r"[^a-z0-9]+")
_SAFE_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\Z")
WATCH_SECONDS = 240  # the server ends a watch after this; we reconnect from the last version
# Bytes a followed log may hold unread before the socket is no longer read (see stream_log).
LOG_STREAM_BUFFER = 64 * 1024


async def new_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from `kubeconfig`, else in-cluster credentials when running in a pod, else
    the default kubeconfig (~/.kube/config or $KUBECONFIG)."""
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return client.ApiClient(configuration)
        return await config.new_client_from_config(
            config_file=kubeconfig, context=context, persist_config=False
        )
    except (OSError, config.ConfigException, ValueError, TypeError) as error:
        raise EngineError(f"cannot load the Kubernetes configuration: {error}") from None


def namespace_for(template: str, owner: str) -> str:
    """`template` with `{username}` replaced by `owner`'s safe name ("distrun-{username}"), or
    `template` itself when it names one namespace for everyone. A name that is not a safe DNS
    label part as it is gets cut down to one plus `--` and a hash of the exact name, so two
    users never share a namespace ("Alice" and "alice" included); the same rule as the hub's
    profile hook (gateway_config/gateway/user_namespaces.py)."""
    if "{username}" not in template:
        return template
    room = 63 - len(template.replace("{username}", ""))
    if _SAFE_NAME_RE.match(owner) and len(owner) <= room:
        name = owner
    else:
        digest = hashlib.sha256(owner.encode()).hexdigest()[:8]
        part = _NOT_DNS_RE.sub("-", owner.lower()).strip("-")[: room - 10].rstrip("-")
        name = f"{part or 'u'}--{digest}"
    namespace = template.replace("{username}", name)
    if not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z", namespace):
        raise EngineError(
            f"the namespace template {template!r} gives an invalid name {namespace!r}"
        )
    return namespace


class Expired(EngineError):
    """410 Gone: the resourceVersion asked for is older than the API server keeps (list again)."""


def api_error(error: Exception, what: str) -> DistrunError:
    """The domain error for a failed call; `what` says what we were doing ("create the job")."""
    if isinstance(error, ApiException):
        message = _api_message(error)
        if error.status == 404:
            return NotFound(f"cannot {what}: {message}")
        if error.status == 409:
            return Conflict(f"cannot {what}: {message}")
        if error.status in (401, 403):
            return Forbidden(f"the cluster does not allow us to {what}: {message}")
        if error.status == 410:
            return Expired(f"cannot {what}: {message}")
        if error.status in (400, 422):
            return SpecError(f"the cluster rejected the request to {what}: {message}")
        return EngineError(f"cannot {what}: the API server answered {error.status}: {message}")
    return EngineError(f"cannot {what}: the Kubernetes API server is unreachable ({error})")


def refusal(status: int, reason: str | None, body: bytes, what: str) -> DistrunError:
    """The domain error for an answer outside 2xx, in the API's words from its body."""
    failure = ApiException(status=status, reason=reason)
    failure.body = body
    return api_error(failure, what)


def _api_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(error.reason or error.status)


_CALL_ERRORS = (ApiException, aiohttp.ClientError, TimeoutError, OSError)


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str


@dataclass(frozen=True)
class Access:
    """One request an engine makes of the API server, as RBAC names it."""

    verb: str
    resource: Resource
    subresource: str = ""


def accesses(resource: Resource, *verbs: str, subresource: str = "") -> tuple[Access, ...]:
    return tuple(Access(verb, resource, subresource) for verb in verbs)


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
PODS = Resource("", "v1", "pods")
CONFIGMAPS = Resource("", "v1", "configmaps")
EVENTS = Resource("", "v1", "events")


class KubeApi:
    """One namespace-agnostic facade over an ApiClient; every method returns plain dicts.

    Long-running requests (watches, followed logs) go through a second client of the same
    cluster and credentials whose pool has no connection limit: they stay open while anyone
    follows a job, and on the shared pool (100 connections) some 16 viewers of 4-replica jobs
    would hold every connection and leave the server's other calls waiting, as the API server
    itself keeps long-running requests apart from its in-flight limit."""

    def __init__(
        self, api_client: Any, *, owns_client: bool = True, http2_logs: bool = True
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._owns_client = owns_client
        # (core, custom) over the streaming client, made on first use: aiohttp needs the loop.
        self._streaming: tuple[Any, Any] | None = None
        # Followed logs over HTTP/2 (h2_logs.py), made on first use; False once the API
        # server turned HTTP/2 down (or `http2_logs` is off): logs go over HTTP/1.1 then.
        self._log_streams: LogStreams | None | bool = None if http2_logs else False

    async def close(self) -> None:
        if isinstance(self._log_streams, LogStreams):
            await self._log_streams.close()
            self._log_streams = None
        if self._streaming is not None:
            await self._streaming[0].api_client.close()
            self._streaming = None
        if self._owns_client:
            await self.api_client.close()

    # --- objects ---

    async def create(self, res: Resource, namespace: str, body: Obj, what: str) -> Obj:
        return await self._call(what, self._method(res, "create"), namespace, body)

    async def get(self, res: Resource, namespace: str, name: str, what: str) -> Obj:
        return await self._call(what, self._method(res, "get"), namespace, name)

    async def get_cluster(self, res: Resource, name: str, what: str) -> Obj:
        """A cluster-scoped custom object (a ClusterTrainingRuntime)."""
        call = self.custom.get_cluster_custom_object
        return await self._call(what, call, res.group, res.version, res.plural, name)

    async def list(
        self,
        res: Resource,
        namespace: str,
        selector: str,
        what: str,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Obj:
        """The list object: `items` and `metadata.resourceVersion`; with `limit`, one page of
        it, `metadata.continue` the token for the next (`continue_from`)."""
        kwargs: dict[str, Any] = {"label_selector": selector}
        if limit is not None:
            kwargs["limit"] = limit
        if continue_from:
            kwargs["_continue"] = continue_from
        return await self._call(what, self._method(res, "list"), namespace, **kwargs)

    async def list_metadata(self, res: Resource, namespace: str, selector: str, what: str) -> Obj:
        """The objects' metadata only (a PartialObjectMetadataList): names, labels, annotations,
        none of their data. Core resources only."""
        assert res.group == "", "metadata lists are used for core resources"

        async def call(**kwargs: Any) -> Any:
            return await self.api_client.call_api(
                f"/api/{res.version}/namespaces/{namespace}/{res.plural}",
                "GET",
                query_params=[("labelSelector", selector)],
                header_params={"Accept": METADATA_LIST},
                auth_settings=["BearerToken"],
                **kwargs,
            )

        return await self._call(what, call)

    async def list_events(self, namespace: str, field_selector: str, what: str) -> Obj:
        method = self.core.list_namespaced_event
        return await self._call(what, method, namespace, field_selector=field_selector)

    async def served_plurals(self, group: str, version: str, what: str) -> set[str]:
        """The resources the API server serves in `group/version` (discovery, which every
        authenticated user may read); NotFound when the group/version is not installed."""
        method = self.custom.get_api_resources
        listed = await self._call(what, method, group, version)
        return {str(r.get("name")) for r in listed.get("resources") or []}

    async def replace(self, res: Resource, namespace: str, name: str, body: Obj, what: str) -> Obj:
        return await self._call(what, self._method(res, "replace"), namespace, name, body)

    async def patch(
        self, res: Resource, namespace: str, name: str, operations: Sequence[Obj], what: str
    ) -> Obj:
        """Applies a JSON patch (RFC 6902: a list of operations) to a custom object."""
        assert res.group, "JSON patches are used for custom objects"
        # A list body is sent as application/json-patch+json.
        body = [dict(operation) for operation in operations]
        return await self._call(what, self._method(res, "patch"), namespace, name, body)

    async def delete(
        self, res: Resource, namespace: str, name: str, what: str, propagation: str = "Foreground"
    ) -> Obj:
        """Deletes `name`; Foreground: the object stays, marked, until its dependents are gone;
        Background: it goes at once and the garbage collector removes its dependents."""
        body = {"propagationPolicy": propagation}
        return await self._call(what, self._method(res, "delete"), namespace, name, body=body)

    async def watch(
        self, res: Resource, namespace: str, selector: str, resource_version: str, what: str
    ) -> AsyncIterator[Obj]:
        """Watch events (`type`, `object`) from `resource_version` until the server ends the
        watch; the caller lists again on a 410 Gone (an ERROR event) and watches anew."""
        method = self._method(res, "list", streaming=True)
        response = await self._raw(
            what,
            method,
            namespace,
            label_selector=selector,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
        )
        try:
            async for line in iter_lines(response):
                if line.strip():
                    yield json.loads(line)
        finally:
            response.release()

    # --- logs ---

    async def read_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        previous: bool = False,
        tail_lines: int | None = None,
    ) -> bytes:
        kwargs: dict[str, Any] = {"container": container, "timestamps": True}
        if previous:
            kwargs["previous"] = True
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        what = f"read the log of pod {pod}"
        response = await self._raw(
            what, self.core.read_namespaced_pod_log, pod, namespace, **kwargs
        )
        try:
            return bytes(await response.read())
        except _CALL_ERRORS as error:
            raise api_error(error, what) from None
        finally:
            response.release()

    @contextlib.asynccontextmanager
    async def stream_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        follow: bool = True,
        previous: bool = False,
    ) -> AsyncIterator[Any]:
        """The log response, read as it arrives (live with `follow`, else to its end): iterate
        it with `StreamedLines`. A slow reader holds the socket back, not the log in memory."""
        what = f"{'follow' if follow else 'read'} the log of pod {pod}"
        query = {"container": container, "timestamps": "true", "follow": str(follow).lower()}
        if previous:
            query["previous"] = "true"
        response = await self._log_over_http2(what, log_path("", namespace, pod, query))
        if response is None:
            method = self._apis(streaming=True)[0].read_namespaced_pod_log
            kwargs = {"container": container, "timestamps": True, "follow": follow}
            if previous:
                kwargs["previous"] = True
            response = await self._raw(what, method, pod, namespace, **kwargs)
            bound_read_buffer(response.content, LOG_STREAM_BUFFER)
        try:
            yield response
        finally:
            response.close()

    def log_connections(self) -> tuple[int, ...]:
        """The streams each HTTP/2 connection of followed logs carries (none over HTTP/1.1)."""
        streams = self._log_streams
        return streams.streams_per_connection() if isinstance(streams, LogStreams) else ()

    async def _log_over_http2(self, what: str, path: str) -> Any:
        """The response to GET `path` over a shared HTTP/2 connection; None where logs go over
        HTTP/1.1 (HTTP/2 off, or the API server or the configuration does not allow it)."""
        streams = self._log_streams
        if streams is False:
            return None
        try:
            if not isinstance(streams, LogStreams):
                streams = self._log_streams = LogStreams(
                    endpoint_from(self.api_client.configuration, self._request_headers),
                    LOG_STREAM_BUFFER,
                    share_transport_tls_buffer,
                )
            response = await streams.get(path)
        except NoHttp2:
            self._log_streams = False
            return None
        except (OSError, TimeoutError) as error:
            raise api_error(error, what) from None
        if 200 <= response.status < 300:
            return response
        try:
            body = await response.read()
        except OSError as error:
            raise api_error(error, what) from None
        raise refusal(response.status, response.reason, body, what)

    async def _request_headers(self) -> dict[str, str]:
        """What the API client sends with every request, credentials (refreshed) included."""
        headers = {"accept": "*/*", "user-agent": self.api_client.user_agent}
        headers.update(self.api_client.default_headers)
        await self.api_client.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    # --- plumbing ---

    def _apis(self, *, streaming: bool) -> tuple[Any, Any]:
        """(CoreV1Api, CustomObjectsApi) on the shared client, or on the streaming one."""
        if not streaming:
            return self.core, self.custom
        if self._streaming is None:
            configuration = copy.copy(self.api_client.configuration)
            configuration.connection_pool_maxsize = 0  # aiohttp: no limit
            return_large_blocks()
            streaming_client = client.ApiClient(configuration)
            streaming_client.default_headers.update(self.api_client.default_headers)
            self._streaming = (
                client.CoreV1Api(streaming_client),
                client.CustomObjectsApi(streaming_client),
            )
        return self._streaming

    def _method(self, res: Resource, verb: str, *, streaming: bool = False) -> Any:
        core, custom_api = self._apis(streaming=streaming)
        if res.group == "":
            kind = {"pods": "pod", "configmaps": "config_map", "events": "event"}[res.plural]
            core_verb = "read" if verb == "get" else verb
            method = getattr(core, f"{core_verb}_namespaced_{kind}")

            async def core_call(namespace: str, *args: Any, **kwargs: Any) -> Any:
                if verb in ("get", "replace", "delete"):
                    name, *rest = args
                    return await method(name, namespace, *rest, **kwargs)
                return await method(namespace, *args, **kwargs)

            return core_call
        custom = getattr(custom_api, f"{verb}_namespaced_custom_object")

        async def custom_call(namespace: str, *args: Any, **kwargs: Any) -> Any:
            return await custom(res.group, res.version, namespace, res.plural, *args, **kwargs)

        return custom_call

    async def _raw(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        """The unread response; a status outside 2xx is raised as a domain error (a raw
        response, unlike a preloaded one, does not raise by itself)."""
        try:
            response = await method(*args, _preload_content=False, **kwargs)
            share_tls_buffer(response)  # a refusal's connection goes back to the pool too
            if 200 <= response.status < 300:
                return response
            body = await response.read()
            response.release()
        except _CALL_ERRORS as error:
            raise api_error(error, what) from None
        raise refusal(response.status, response.reason, bytes(body), what)

    async def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Obj:
        response = await self._raw(what, method, *args, **kwargs)
        try:
            data = json.loads(await response.read())
        except _CALL_ERRORS as error:
            raise api_error(error, what) from None
        except ValueError:
            raise EngineError(
                f"cannot {what}: the API server sent something that is not JSON"
            ) from None
        finally:
            response.release()
        if not isinstance(data, dict):
            raise EngineError(f"cannot {what}: unexpected answer from the API server")
        return data


def bound_read_buffer(reader: Any, limit: int) -> None:
    """Make aiohttp stop reading the socket once `limit` bytes of a response wait unread.

    kubernetes_asyncio opens its session with `read_bufsize=2**21` (for large watch events),
    so aiohttp pauses only at 4 MiB unread per response; a log arrives as one HTTP chunk per
    line, about four times its size in memory there. A follower whose consumer stalls would
    hold some 16 MiB per replica. aiohttp has no public way to lower a response's limits, so
    its thresholds are set here when present (tests/k8s/test_kube_log_fidelity.py pins the
    result)."""
    if hasattr(reader, "_high_water") and hasattr(reader, "_low_water"):
        reader._low_water, reader._high_water = limit // 2, limit
    if hasattr(reader, "_high_water_chunks") and hasattr(reader, "_low_water_chunks"):
        chunks = max(4, limit // 64)
        reader._low_water_chunks, reader._high_water_chunks = chunks // 2, chunks


def share_tls_buffer(response: Any) -> None:
    """Make the TLS connection under `response` read the socket into its event loop's one
    shared buffer instead of a buffer of its own.

    Python's asyncio (3.11+, sslproto.SSLProtocol) gives every TLS connection a 256 KiB buffer
    for the bytes it reads off the socket, whatever comes through it: a server following 1,200
    replicas holds a connection per replica, 300 MiB of buffers for a few lines a second each
    (docs/performance.md). On a selector event loop the buffer is only used within one
    callback (get_buffer, recv_into, then buffer_updated copies the bytes into the TLS
    object), so one buffer per loop serves every connection; it keeps asyncio's size, since a
    smaller one cuts every read to that size: a follower catching up on a long log then reads
    it several times slower (with 16 KiB it fell behind the pods it followed, so their
    unfinished lines went unseen: tests/k8s/test_kube_log_fidelity.py); what it reads reaches
    the TLS object in slices (_buffer_updated_in_slices), and the decrypted bytes are taken
    from it a TLS record at most at a time (TLS_RECORD_READ). asyncio has no public way to do
    this: its attributes are set when they are there, on a selector transport only (elsewhere
    nothing changes)."""
    connection = getattr(response, "connection", None)
    share_transport_tls_buffer(getattr(connection, "transport", None))


def share_transport_tls_buffer(transport: Any) -> None:
    """share_tls_buffer for a TLS transport itself."""
    protocol: Any = getattr(transport, "_ssl_protocol", None)
    if protocol is None or not all(
        hasattr(protocol, name) for name in ("max_size", "_ssl_buffer", "_ssl_buffer_view")
    ):
        return
    selector_transport = getattr(asyncio.selector_events, "_SelectorSocketTransport", None)
    if selector_transport is None or not isinstance(
        getattr(protocol, "_transport", None), selector_transport
    ):
        return
    # asyncio's own size (its class's: this protocol's max_size is lowered below).
    shared = _loop_tls_buffer(type(protocol).max_size)
    if protocol._ssl_buffer is not shared.obj:
        protocol._ssl_buffer, protocol._ssl_buffer_view = shared.obj, shared
        protocol.buffer_updated = functools.partial(_buffer_updated_in_slices, protocol)
        # asyncio takes the decrypted bytes with SSLObject.read(max_size), which allocates
        # max_size before shrinking to what it got, twice a socket read (the last read finds
        # nothing). 256 KiB is past the size from which glibc maps a block on its own (held at
        # 128 KiB by return_large_blocks), so each line read mapped and unmapped memory (CPU a
        # line read 170 us against 87-101 this way, benchmarks/bench_tls_read.py). A read
        # returns at most one record, so asking for more than a record's plaintext never reads
        # more. The socket is still read into the whole shared buffer: get_buffer hands it out
        # whatever max_size says.
        protocol.max_size = TLS_RECORD_READ


TLS_SLICE = 16 * 1024  # the TLS object is handed a socket read this much at a time
TLS_RECORD_READ = 16 * 1024  # the most plaintext one TLS record carries (2^14 bytes)


def _buffer_updated_in_slices(protocol: Any, nbytes: int) -> None:
    """asyncio's SSLProtocol.buffer_updated, handed `nbytes` read off the socket TLS_SLICE at
    a time, as if they had come in smaller reads.

    It writes what was read into OpenSSL's in-memory input (a memory BIO), then decrypts.
    That BIO keeps the capacity of the largest write it took for the connection's life: after
    a follower catches up on a long log in 256 KiB reads, 256-390 KiB a connection stay
    resident (docs/performance.md). Handed a slice at a time, it holds a slice and at most one
    unfinished TLS record. The socket is still read 256 KiB at a time."""
    view = protocol._ssl_buffer_view
    whole = type(protocol).buffer_updated
    try:
        for start in range(0, nbytes, TLS_SLICE):
            protocol._ssl_buffer_view = view[start:]
            whole(protocol, min(TLS_SLICE, nbytes - start))
    finally:
        protocol._ssl_buffer_view = view


# glibc's mallopt parameter for the size from which a block is mapped on its own (M_MMAP_THRESHOLD)
_M_MMAP_THRESHOLD = -3
LARGE_BLOCK = 128 * 1024  # glibc's default threshold, kept from moving up


@functools.cache
def return_large_blocks() -> None:
    """Make this process's C allocator give every block of LARGE_BLOCK bytes or more back to
    the system when it is freed.

    Each TLS connection asyncio opens allocates its own 256 KiB buffer (share_tls_buffer lets
    it go once the response arrives). glibc maps blocks that large on their own at first, but
    once one is freed it raises that threshold to the freed size (the "dynamic mmap
    threshold"), so the later ones come from the heap: a server opening 1,200 log streams at
    once leaves some 300 MiB of freed buffers in its heap, resident and seldom reusable
    (docs/performance.md). Setting the threshold, to glibc's own default, stops it moving;
    elsewhere (no mallopt) nothing changes."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):  # a C library without mallopt
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK)


_TLS_BUFFERS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, memoryview]" = (
    weakref.WeakKeyDictionary()
)


def _loop_tls_buffer(size: int) -> memoryview:
    """The running loop's shared TLS read buffer, of at least `size` bytes."""
    loop = asyncio.get_running_loop()
    view = _TLS_BUFFERS.get(loop)
    if view is None or len(view) < size:
        view = _TLS_BUFFERS[loop] = memoryview(bytearray(size))
    return view


class StreamedLines:
    """The lines of a streamed response (a followed log) without their newline, with the line
    still being written readable at any time (`unfinished()`: a progress bar being redrawn).

    With `max_line`, a line keeps only its first `max_line` bytes as it arrives, so a line that
    never ends holds no more than that; of what comes past that, only the newest redraw (the
    bytes from its last carriage return) is kept, for `unfinished()`. `on_unfinished` is called
    whenever a chunk leaves an unfinished line behind. A line cut off by the stream's end is not
    yielded: whether it was finished only the whole log tells."""

    def __init__(
        self,
        response: Any,
        max_line: int | None = None,
        on_unfinished: Callable[[], None] | None = None,
    ) -> None:
        self._response = response
        self._max = max_line
        self._on_unfinished = on_unfinished
        self._parts: list[bytes] = []
        self._size = 0
        self._redraw = bytearray()  # past max_line: the newest redraw

    def unfinished(self) -> bytes:
        return b"".join(self._parts) + bytes(self._redraw)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.content.iter_any():
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                self._keep(chunk[start:end])
                yield b"".join(self._parts)
                self._parts, self._size, start = [], 0, end + 1
                self._redraw.clear()
            self._keep(chunk[start:])
            if self._parts and self._on_unfinished is not None:
                self._on_unfinished()

    def _keep(self, piece: bytes) -> None:
        if self._max is not None and self._size + len(piece) > self._max:
            room = max(0, self._max - self._size)
            self._keep_redraw(piece[room:])
            piece = piece[:room]
        if piece:
            self._parts.append(piece)
            self._size += len(piece)

    def _keep_redraw(self, past: bytes) -> None:
        assert self._max is not None
        carriage = past.rfind(b"\r")
        if carriage >= 0:
            self._redraw[:] = past[carriage:]
        else:
            self._redraw += past
        del self._redraw[: max(0, len(self._redraw) - self._max)]


async def iter_lines(response: Any, max_line: int | None = None) -> AsyncIterator[bytes]:
    """The lines of a streamed response (a watch) without the newline; a last line without a
    newline is yielded when the stream ends. With `max_line`, a line keeps only its first
    `max_line` bytes."""
    lines = StreamedLines(response, max_line)
    async for line in lines:
        yield line
    rest = lines.unfinished()
    if rest:
        yield rest[:max_line]
