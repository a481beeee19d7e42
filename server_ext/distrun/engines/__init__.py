"""The `Engine` protocol, the registry, and the engines: `local/` (processes on this machine)
and `kube/` (Kubernetes). Imports only `distrun.core`."""
