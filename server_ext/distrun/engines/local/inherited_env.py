"""What a local job inherits of the server's environment: everything but the server's own
credentials. A replica runs the user's code with the user's rights already; what it must not
get is what lets the *server* act: its Jupyter token, the hub's API token for this server, the
gateway's token, distrun's own tokens. The spec's `%env` values and the operator's variables
are added on top of this by the supervisor.

KUBECONFIG stays: it names a file of the user's own, which their code can read in any case.
"""

import re
from collections.abc import Mapping

SERVER_CREDENTIALS = re.compile(
    r"""\A(?:
        JUPYTER_TOKEN | JUPYTER_PASSWORD | JUPYTER_GATEWAY_.* | JPY_.* | JUPYTERHUB_.*
        | DISTRUN_TOKEN | DISTRUN_TOKEN_FILE | DISTRUN_GATEWAY_.* | DISTRUN_KERNEL_TOKEN.*
        | KG_AUTH_TOKEN | EG_AUTH_TOKEN
    )\Z""",
    re.VERBOSE,
)


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the server's credentials."""
    return {name: value for name, value in environ.items() if not SERVER_CREDENTIALS.match(name)}
