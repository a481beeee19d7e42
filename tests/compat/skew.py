"""What the version-skew tests share: jobs with known lines, as both releases' clients read
them (JSON, for the previous release's client in its own process)."""

from distrun.core.spec import JobSpec

CODE = "import os\nfor i in range(5):\n    print(os.environ['DISTRUN_REPLICA'], i, flush=True)\n"
SPEC_JSON = {"framework": "generic", "code": CODE, "roles": {"worker": {"replicas": 2}}}
SPEC = JobSpec.from_dict(SPEC_JSON)
SLEEPER_JSON = {
    "framework": "generic",
    "code": "import time\ntime.sleep(120)\n",
    "roles": {"worker": {"replicas": 1}},
}
SLEEPER = JobSpec.from_dict(SLEEPER_JSON)
EXPECTED = sorted((f"worker-{r}", i, f"worker-{r} {i}") for r in range(2) for i in range(5))
MAX_REPLICAS = 7  # the servers' limit (conftest.py), off its default
