"""An identity provider for the test servers: each configured token is one user.

Loaded by the jupyter_server subprocesses of tests/k8s/distrun_server.py (importable there
because the repository root is on their PYTHONPATH); keep its imports to jupyter_server."""

from jupyter_server.auth.identity import IdentityProvider, User
from tornado.web import RequestHandler
from traitlets import Dict


class TokenPerUserIdentityProvider(IdentityProvider):
    """Token authentication where the token says who you are: {"<token>": "alice", ...}."""

    users_by_token = Dict(config=True, help="token -> user name")

    async def get_user_token(self, handler: RequestHandler) -> User | None:
        token = self.get_token(handler)
        name = self.users_by_token.get(token) if token else None
        return User(name) if name else None
