"""What the version-skew tests share: the previous release, and a job with known lines."""

from distrun.core.spec import JobSpec

# The last release before the log websocket's `runs` shape; tests/compat/*_de7ac60.py are
# copies of its client modules.
PREVIOUS = "de7ac60fa8f0711d40601cc367ef93bc2f05a5b9"
CODE = "import os\nfor i in range(5):\n    print(os.environ['DISTRUN_REPLICA'], i, flush=True)\n"
SPEC = JobSpec.from_dict(
    {"framework": "generic", "code": CODE, "roles": {"worker": {"replicas": 2}}}
)
EXPECTED = sorted((f"worker-{r}", i, f"worker-{r} {i}") for r in range(2) for i in range(5))
MAX_REPLICAS = 7  # the servers' limit (conftest.py), off its default
