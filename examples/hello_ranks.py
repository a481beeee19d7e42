"""Each replica says who it is: the variables every replica of a generic job starts with."""

import os
import socket

replica = os.environ["DISTRUN_REPLICA"]
rank, world_size = os.environ["RANK"], os.environ["WORLD_SIZE"]
rendezvous = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
print(
    f"{replica} is rank {rank} of {world_size} on {socket.gethostname()}, rendezvous {rendezvous}"
)
