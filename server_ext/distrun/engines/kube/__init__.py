"""The Kubernetes engines: the shared `KubeEngine` (engine.py) and one module per kind of job
(Kubeflow Training Operator v1, Trainer v2, Volcano), with their pure manifest builders in
`manifests/`."""
