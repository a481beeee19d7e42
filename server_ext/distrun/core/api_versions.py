"""The versions of the REST resources a client parses (jobs, a job, log pages, engines,
sweeps, metrics), named in the `Distrun-API-Version` request header. The server serves every
version listed here (server/handlers.py) and names the one it answered in the same response
header; a client sends the version it parses (client/server_client.py, the extension's
common/api.ts). The log websocket has versions of its own (stream_versions.py).

Within a version a resource only gains fields (a request gains optional ones); a client
ignores fields it does not know. Removing, renaming or changing the meaning of a field makes a
new version, served beside the previous one for at least one release."""

from distrun.core.errors import VersionNotServed

API_VERSION_HEADER = "Distrun-API-Version"
# The first release's shapes (de7ac60), with the fields added since.
REST_V1 = "1"
# Newest first.
REST_VERSIONS = (REST_V1,)


def served_version(asked: str | None) -> str:
    """The version to answer a request that asked for `asked` (None: no header, the first
    version), or VersionNotServed saying what this server serves."""
    if asked is None:
        return REST_V1
    version = asked.strip()
    if version in REST_VERSIONS:
        return version
    served = ", ".join(REST_VERSIONS)
    raise VersionNotServed(
        f"this server serves version {served} of the distrun REST API, and the request asked "
        f"for {asked!r} ({API_VERSION_HEADER} header): use a distrun client of the server's "
        "release, or upgrade the server"
    )
