"""The namespace of each JupyterHub user: one name per user, safe for any username.

Shared by the hub's profile hook (distrun_profiles.py) and the gateway's identity front, which
must agree on where a user's notebook server, kernels and jobs live. Stdlib only.

A username that is already a safe DNS label part (lower-case letters, digits and single
dashes) is used as it is; any other is cut down to such a part and followed by `--` and a
hash of the exact username. A safe name never holds `--`, so two users never share a
namespace: not "Alice" and "alice", not "a.b" and "a-b".
"""

import hashlib
import re

NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_SAFE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\Z")
_UNSAFE_CHARS = re.compile(r"[^a-z0-9]+")
_HASH_CHARS = 8


def user_namespace(template: str, username: str) -> str:
    """`template` with `{username}` replaced by the user's safe name; ValueError when the
    template cannot form a namespace."""
    room = 63 - len(template.replace("{username}", ""))
    if room < _HASH_CHARS + 3:
        raise ValueError(f"namespace template {template!r} leaves no room for a username")
    name = (
        username if _SAFE_RE.match(username) and len(username) <= room else _hashed(username, room)
    )
    namespace = template.replace("{username}", name)
    if not NAMESPACE_RE.match(namespace):
        raise ValueError(f"namespace template {template!r} does not form a namespace name")
    return namespace


def _hashed(username: str, room: int) -> str:
    digest = hashlib.sha256(username.encode()).hexdigest()[:_HASH_CHARS]
    part = _UNSAFE_CHARS.sub("-", username.lower()).strip("-")
    part = part[: room - _HASH_CHARS - 2].rstrip("-")
    return f"{part}--{digest}" if part else f"u--{digest}"
