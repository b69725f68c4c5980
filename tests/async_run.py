"""Running an AsyncEngine inside a test: a fresh event loop, the engine started and stopped around the body."""

from __future__ import annotations

import asyncio


def run(llm, body) -> object:
    """Run `body(engine)` with a started AsyncEngine on a fresh event loop; stop the engine after."""
    from model_optimizer.runtime.engine.async_engine import AsyncEngine

    async def main():
        engine = AsyncEngine.in_process(llm.engine)
        engine.start()
        try:
            return await body(engine)
        finally:
            await asyncio.to_thread(engine.stop)

    return asyncio.run(main())


async def blocking(fn, *args):
    """Calls that block: run them off the event loop that receives the engine's outputs."""
    return await asyncio.to_thread(fn, *args)
