"""How a replica learns where its job keeps checkpoints and which attempt it is: environment
variables, read by `distrun.checkpoint`. Standard library only (imported in replicas).

DISTRUN_CHECKPOINT_DIR is a directory that outlives the job's restarts; DISTRUN_RESTART is the
run's number, 0 for the first run of the job.
"""

CHECKPOINT_DIR_ENV = "DISTRUN_CHECKPOINT_DIR"
RESTART_ENV = "DISTRUN_RESTART"
# In the checkpoint directory: a JSON line per resume ({"time", "restart", "step"}), appended by
# `distrun.checkpoint.load` on rank 0, read by the engine into the job's timeline.
RESUMED_FILE = ".distrun-resumed.jsonl"
# In the checkpoint directory: the modules rank 0 had imported when it saved (JSON: a list of
# [name, file] in import order), written by `distrun.checkpoint.save`, read by the local
# engine's supervisor to start the next attempt's interpreters with them imported
# (engines/local/restart_interpreters.py).
IMPORTS_FILE = ".distrun-imports.json"


def checkpoint_env(directory: str, restart: int) -> dict[str, str]:
    """The variables that give a replica of attempt `restart` its checkpoint `directory`."""
    return {CHECKPOINT_DIR_ENV: directory, RESTART_ENV: str(restart)}
