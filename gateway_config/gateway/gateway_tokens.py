"""Per-user tokens for the gateway's identity front: signed by the hub, checked by the front.

A token is `v2.<issued>.<expires>.<mac>.<username>`: the times in whole seconds since the epoch
(`expires` 0: never), the mac HMAC-SHA256(key, context + issued + expires + username). The key
is in a Secret only the hub and the front read, so a user can present their own name and nobody
else's, until the token expires or an administrator revokes the user's tokens.

Revocation is per user and by time: `revoke(directory, username)` records "every token of this
user issued before now is void" in a small file of the directory the front's replicas share
(`python identity_front.py revoke USER` in the front's container). The user's next server
spawn gets a new token from the hub.

Standard library only: this file runs in the hub's image and in the gateway's.
"""

import hashlib
import hmac
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

CONTEXT = b"distrun-gateway-v2\0"
USERNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}\Z")
_TOKEN_RE = re.compile(
    r"v2\.(?P<issued>[0-9]{1,12})\.(?P<expires>[0-9]{1,12})\.(?P<mac>[0-9a-f]{64})\."
    r"(?P<username>[^\x00]{1,128})\Z"
)
_VOID_FOR_EVER = 2**62


@dataclass(frozen=True)
class Verdict:
    """Who a token proves, or why it proves nobody (`username` None, `reason` for the 401)."""

    username: str | None
    reason: str = ""


def sign(key: bytes, username: str, lifetime_seconds: int = 0, now: float | None = None) -> str:
    """`username`'s token, valid for `lifetime_seconds` (0: until revoked)."""
    if not USERNAME_RE.match(username):
        raise ValueError(f"user name {username!r} cannot have a gateway token")
    issued = int(time.time() if now is None else now)
    expires = issued + lifetime_seconds if lifetime_seconds > 0 else 0
    return f"v2.{issued}.{expires}.{_mac(key, issued, expires, username)}.{username}"


def verify(
    key: bytes, token: str, revocations: Path | None = None, now: float | None = None
) -> Verdict:
    """Whom `token` proves: signed with `key`, not expired, not revoked."""
    match = _TOKEN_RE.match(token)  # ASCII checked here: compare_digest refuses other text
    if match is None or not USERNAME_RE.match(match["username"]):
        return Verdict(None, "a valid distrun gateway token is required")
    issued, expires, username = int(match["issued"]), int(match["expires"]), match["username"]
    if not hmac.compare_digest(_mac(key, issued, expires, username), match["mac"]):
        return Verdict(None, "a valid distrun gateway token is required")
    moment = time.time() if now is None else now
    if expires and moment >= expires:
        return Verdict(None, "this gateway token has expired; restart your server from the hub")
    if revocations is not None and issued < revoked_before(revocations, username):
        return Verdict(None, "this gateway token was revoked; restart your server from the hub")
    return Verdict(username)


def revoke(directory: Path, username: str, now: float | None = None) -> None:
    """Voids every token of `username` issued before `now` (atomically, for every replica)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = _revocation_file(directory, username)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(str(int(time.time() if now is None else now) + 1))
    temporary.replace(path)


def revoked_before(directory: Path, username: str) -> int:
    """The time before which `username`'s tokens are void (0: none revoked; an unreadable
    record voids them all: fail closed)."""
    try:
        return int(_revocation_file(directory, username).read_text())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError):
        return _VOID_FOR_EVER


def _revocation_file(directory: Path, username: str) -> Path:
    return directory / hashlib.sha256(username.encode()).hexdigest()


def _mac(key: bytes, issued: int, expires: int, username: str) -> str:
    message = CONTEXT + f"{issued}\0{expires}\0{username}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()
