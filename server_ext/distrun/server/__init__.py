"""The jupyter_server extension: the app, its routes and handlers, the log websocket and the
mapping of domain errors to HTTP. Imports `distrun.core` and `distrun.engines`."""
