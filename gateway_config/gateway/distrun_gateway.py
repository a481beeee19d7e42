"""Enterprise Gateway as one replica of several: a rolling update must not kill users' kernels.

Run it instead of `jupyter enterprisegateway` (same arguments):

    python -m distrun_gateway --config=/etc/distrun/gateway/enterprise_gateway_config.py

Upstream EG 3.3.0 has two behaviours that break a multi-replica deployment, fixed here:

1. On SIGTERM (a pod being replaced) EG shuts down every kernel it knows. With session
   persistence and `availability_mode=replication` the kernels' sessions live in shared storage,
   so a terminating replica only has to leave: another replica revives a kernel from its
   persisted session on the first request for it. `ReplicaGatewayApp.shutdown` does that.
2. A replica that revived a kernel keeps an auto-restarter on it. When the kernel is shut down
   through ANOTHER replica (which deletes the persisted session), the first replica sees a dead
   kernel and restarts it under the same id. `ReplicaKernelManager.restart_kernel` restarts a
   kernel only while its persisted session still exists; otherwise it forgets the kernel.

Only the stdlib and Enterprise Gateway are imported: this file runs in EG's image as shipped,
mounted from a ConfigMap.
"""

import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from enterprise_gateway.enterprisegatewayapp import EnterpriseGatewayApp
from enterprise_gateway.mixins import EnterpriseGatewayConfigMixin
from enterprise_gateway.services.kernels.remotemanager import (
    RemoteKernelManager,
    RemoteMappingKernelManager,
)
from enterprise_gateway.services.processproxies.processproxy import LocalProcessProxy
from enterprise_gateway.services.sessions.kernelsessionmanager import (
    KERNEL_SESSIONS_DIR_NAME,
    FileKernelSessionManager,
)
from jupyter_client import localinterfaces

REPLICATION = EnterpriseGatewayConfigMixin.AVAILABILITY_REPLICATION


class ReplicaSessionManager(FileKernelSessionManager):
    """File-backed kernel sessions in a directory every replica shares."""

    def is_persisted(self, kernel_id: str) -> bool:
        """False once some replica deleted the kernel's session (the kernel was shut down)."""
        if not self.enable_persistence:
            return True  # nothing shared to consult: behave as upstream
        sessions = Path(str(self.persistence_root), str(KERNEL_SESSIONS_DIR_NAME))
        return (sessions / f"{kernel_id}.json").exists()


class ReplicaKernelManager(RemoteKernelManager):
    """Auto-restarts a dead kernel only while its session is still persisted."""

    async def restart_kernel(self, now: bool = False, **kwargs: Any) -> None:
        kernel_id = str(self.kernel_id)
        sessions = self.kernel_session_manager
        deleted = isinstance(sessions, ReplicaSessionManager) and not sessions.is_persisted(
            kernel_id
        )
        if now and deleted:
            self.log.warning(
                "Kernel %s died after another replica deleted its session; "
                "forgetting it instead of restarting it",
                kernel_id,
            )
            self.stop_restarter()
            self.mapping_kernel_manager.remove_kernel(kernel_id)
            return
        await super().restart_kernel(now, **kwargs)


class ReplicaMappingKernelManager(RemoteMappingKernelManager):
    def _kernel_manager_class_default(self) -> str:
        return f"{__name__}.ReplicaKernelManager"


class ReplicaLocalProcessProxy(LocalProcessProxy):
    """EG's local process proxy, fixed for kernels another replica started on this machine.

    Used by the local (test) kernelspec only; pod kernels use the Kubernetes process proxy.
    Upstream, a revived local kernel is addressed at the machine's public IP although it
    listens on loopback (so a second replica's websocket hangs), and is signalled with
    `kill -SIG -PGID`, which procps-ng 4.0.2 (Debian 12) answers with success without
    signalling the group.
    """

    def load_process_info(self, process_info: dict[str, Any]) -> None:
        super().load_process_info(process_info)
        self.kernel_manager.ip = localinterfaces.LOCALHOST  # where local kernels listen

    def local_signal(self, signum: int) -> bool | None:
        try:
            if self.pgid > 0 and signum > 0:
                os.killpg(self.pgid, signum)
            else:
                os.kill(self.pid, signum)
        except OSError:
            return False
        return None


class ReplicaGatewayApp(EnterpriseGatewayApp):
    name = "distrun-enterprise-gateway"
    _terminating = False

    def _signal_stop(self, sig: int, frame: FrameType | None) -> None:
        self._terminating = True
        super()._signal_stop(sig, frame)

    def shutdown(self) -> None:
        if self._terminating and self.availability_mode == REPLICATION:
            kernels = self.kernel_manager.list_kernel_ids()
            self.log.info(
                "SIGTERM with replicated sessions: leaving %d kernel(s) running for the other "
                "replicas: %s",
                len(kernels),
                ", ".join(kernels) or "none",
            )
            return
        super().shutdown()


def main(argv: list[str] | None = None) -> None:
    # Kernel manager classes are found by dotted name; make this file importable by its own
    # name even when it runs as __main__, so there is only one copy of each class.
    sys.modules.setdefault("distrun_gateway", sys.modules[__name__])
    app = ReplicaGatewayApp.instance()
    app.kernel_manager_class = ReplicaMappingKernelManager
    app.kernel_session_manager_class = ReplicaSessionManager
    app.initialize(argv)
    if app.availability_mode != REPLICATION:
        app.log.warning("availability_mode is not 'replication': a SIGTERM stops every kernel")
    app.start()


if __name__ == "__main__":
    main()
