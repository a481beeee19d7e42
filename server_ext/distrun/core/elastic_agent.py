"""Settings of torch's elastic agent (`torch.distributed.run`) that distrun gives every engine's
elastic replicas (`%elastic`; docs/fault-tolerance.md), so they re-form the same way locally and
on a cluster."""

# Seconds a rendezvous that has MIN members waits for more before it starts (torch: 30).
LAST_CALL_SECONDS = 2
# An agent that has not said it is alive for KEEP_ALIVE_SECONDS x KEEP_ALIVE_MISSED is dropped
# from the rendezvous, so that the others can re-form without it (torch: 5 s x 3).
KEEP_ALIVE_SECONDS = 1
KEEP_ALIVE_MISSED = 3

# The c10d rendezvous's settings (its `--rdzv-conf`).
RDZV_CONF = {
    "last_call_timeout": str(LAST_CALL_SECONDS),
    "keep_alive_interval": str(KEEP_ALIVE_SECONDS),
    "keep_alive_max_attempt": str(KEEP_ALIVE_MISSED),
}

# Set for the agents unless the job sets it: with the agents sharing the rendezvous store for
# their workers' bootstrap (torch's default since 2.4), an agent that joins a later round (a
# replica restarted) waits for the address of that round's rank 0 forever, as rank 0 publishes
# it only in its own first round (torch 2.15 dynamic_rendezvous.next_rendezvous).
AGENT_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
