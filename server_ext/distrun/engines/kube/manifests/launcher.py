"""distrun's replica launcher, shipped in the job's ConfigMap for engines whose pod template is
shared by several replicas that need different variables (Volcano tasks, Trainer v2 nodes).

It runs with the image's own python, so it uses the standard library only. It finds which
replica it is from a group (the task, set in the template) and an index (the variable the
controller injects: `VC_TASK_INDEX`, `JOB_COMPLETION_INDEX`), sets that replica's variables
from `replicas.json` beside it, and replaces itself with the user's command: no shell, ever.
"""

import json
import os
import sys


def main(argv: list[str]) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "replicas.json"), encoding="utf-8") as table_file:
        table = json.load(table_file)
    group = os.environ.get("DISTRUN_GROUP", "")
    index_text = os.environ.get(table["index_variable"], "")
    replicas = table["groups"].get(group, [])
    if not index_text.isdigit() or int(index_text) >= len(replicas):
        sys.stderr.write(
            f"[distrun] cannot tell which replica this is: group {group!r}, "
            f"{table['index_variable']}={index_text!r}\n"
        )
        sys.exit(2)
    replica = replicas[int(index_text)]
    os.environ.update(table["env"][replica])
    os.chdir(table["workdir"])
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
