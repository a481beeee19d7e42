"""Pure builders: a validated `JobSpec` in, the Kubernetes objects that run it out.

No I/O and no client here; the engines send what these return. One module per kind:
`kubeflow` (Training Operator v1), `trainer` (Trainer v2), `volcano`; `configmap` carries the
code; `common` holds labels, owner identity and operator options.
"""
