"""Clients of distrun: the backends (a server, or an engine in-process), console rendering, the
`distrun` CLI and the IPython kernel magic. Imports `distrun.core` and `distrun.engines`."""
