"""Job ids: `{name}-{5 random [a-z0-9]}`, a DNS-1035 label of at most 40 characters.

40 leaves room for the longest replica suffix ("-launcher-63") inside Kubernetes' 63-character
names. Every id that arrives from outside goes through `check_job_id` before it touches a file
or an API, so an id can never be a path.
"""

import re
import secrets
import string

from distrun.core.errors import NotFound

MAX_JOB_ID_LENGTH = 40
SUFFIX_LENGTH = 5
_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
JOB_ID_RE = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?\Z")
_NOT_LABEL_CHARS_RE = re.compile(r"[^a-z0-9]+")


def new_job_id(name: str) -> str:
    """A fresh id for a job called `name`; `name` is sanitised, never rejected."""
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(SUFFIX_LENGTH))
    return f"{_sanitise(name)}-{suffix}"


def check_job_id(job_id: object) -> str:
    """`job_id` itself if it is a valid id; NotFound (never a hint of why) otherwise."""
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise NotFound(f"no job {str(job_id)[:80]!r}")
    return job_id


def _sanitise(name: str) -> str:
    label = _NOT_LABEL_CHARS_RE.sub("-", name.lower()).strip("-")
    if not label or not label[0].isalpha():
        label = f"job-{label}".rstrip("-")
    return label[: MAX_JOB_ID_LENGTH - SUFFIX_LENGTH - 1].rstrip("-")
