"""The loop a load runs on: uvloop where installed, asyncio's when asked or absent."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from runtime import event_loop, signals

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop is not installed here")
def test_commands_run_on_uvloop_where_it_is_installed(monkeypatch) -> None:
    monkeypatch.delenv(event_loop.LOOP_ENV, raising=False)
    assert event_loop.run(_loop_module()).startswith("uvloop")
    assert signals.run(_loop_module()).startswith("uvloop")  # what every command uses


def test_asyncio_loop_when_asked(monkeypatch) -> None:
    monkeypatch.setenv(event_loop.LOOP_ENV, "asyncio")
    assert event_loop.loop_factory() is None
    assert event_loop.run(_loop_module()).startswith("asyncio")
