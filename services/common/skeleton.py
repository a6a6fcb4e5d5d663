"""Stand-in for a service whose work arrives with a later issue.

It starts, says plainly that it does nothing yet, and waits for SIGTERM, so the
local stack and the deployment files already have their final shape.
"""

import asyncio
import logging
import signal


def idle(service: str, arrives_with: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger(f"rubricd.{service}").warning("%s is a skeleton: it consumes nothing yet (%s)", service, arrives_with)

    async def wait() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()

    asyncio.run(wait())
