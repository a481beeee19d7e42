"""Once the server runs, distrun freezes the heap its start-up made (gc.freeze), so full
garbage collections stop scanning it while logs stream."""

import gc

from distrun.server.app import DistrunApp


async def test_the_startup_heap_is_frozen_unless_configured_not_to_be() -> None:
    gc.unfreeze()
    try:
        await DistrunApp(freeze_startup_heap=False)._start_jupyter_server_extension(None)
        assert gc.get_freeze_count() == 0
        await DistrunApp()._start_jupyter_server_extension(None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
