"""The embedded engine in a child process: what ``prefillscope bench`` measures by default.

A client and an engine that share one interpreter share one lock: every step the engine
computes, and every ``/metrics`` page it renders (~2.5 ms with prometheus_client), holds
the load generator's event loop back, and the client's timestamps, dispatch lag and ITL
tail then describe our own process rather than the modelled server. In a child process
the engine has its own interpreter (and, on a multi-core machine, its own core), exactly
like a remote server.

The child is ``python -m simengine.engine_process``: it reads its configuration as JSON
on stdin, prints one JSON line with its URL and resolved pool size once it listens, and
serves until SIGTERM or until its parent dies (``PR_SET_PDEATHSIG`` on Linux, so a
crashed or killed bench never leaves an engine behind). It ignores SIGINT: Ctrl-C in a
terminal reaches the whole process group, and the parent must be the one to decide how
the run ends (in-flight requests recorded as cancelled, not cut by a vanished server).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import sys
from typing import Any

from perfmodel.config import EngineConfig
from runtime.child import become_child, read_message, say, stop_process
from simengine.disagg_config import DisaggConfig
from simengine.embedded import Running, latency_gc, start_server
from simengine.kv_link import LinkSpec
from simengine.server import ServerOptions
from workloads.errors import InputError

_STARTUP_TIMEOUT_S = 60.0
_STOP_GRACE_S = 5.0


class EngineProcess(Running):
    """The engine server in a child process; same surface as ``EmbeddedServer``.

    ``url`` is the base URL once started; ``num_gpu_blocks`` the KV pool the engine
    resolved (from memory and weights unless configured).
    """

    num_gpu_blocks: int | None = None
    _proc: subprocess.Popen[str] | None = None

    def start(self) -> EngineProcess:
        """Start the child and return once it listens (or raise with what it said)."""
        if self._proc is not None:
            raise RuntimeError("EngineProcess already started")
        self.config.validate()
        request = {
            "config": dataclasses.asdict(self.config),
            "stream_interval": self.stream_interval,
            "disagg": dataclasses.asdict(self.disagg) if self.disagg else None,
            "host": self.host,
            "port": self.port,
        }
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "simengine.engine_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request))
        self._proc.stdin.close()
        try:
            ready = _read_ready(self._proc)
        except BaseException:
            self.stop()
            raise
        self.url = ready["url"]
        self.num_gpu_blocks = ready["num_gpu_blocks"]
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_process(proc, _STOP_GRACE_S)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _read_ready(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The child's one ready line; what it said on stderr when it died or stayed silent."""
    assert proc.stderr is not None
    ready = read_message(proc, _STARTUP_TIMEOUT_S)
    if ready is not None:
        if "input_error" in ready:  # bad configuration the child found: the user's to fix
            raise InputError(**ready["input_error"])
        return ready
    if proc.poll() is None:
        raise RuntimeError(f"the embedded engine did not listen within {_STARTUP_TIMEOUT_S:.0f} s")
    tail = proc.stderr.read().strip().splitlines()[-1:] or ["no output"]
    raise RuntimeError(f"the embedded engine exited with status {proc.returncode}: {tail[0]}")


# -- the child -------------------------------------------------------------------------
async def _serve(request: dict[str, Any]) -> None:
    config = EngineConfig(**request["config"])
    disagg = request.get("disagg")
    if disagg is not None:  # the link arrives as a dict: rebuild the frozen dataclasses
        disagg = DisaggConfig(**{**disagg, "link": LinkSpec(**disagg["link"])})
    options = ServerOptions(stream_interval=request["stream_interval"], disagg=disagg)
    server, runner, url = await start_server(config, options, request["host"], request["port"])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        with latency_gc():
            say({"url": url, "num_gpu_blocks": server.core.num_gpu_blocks})
            await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    become_child()
    try:
        asyncio.run(_serve(json.loads(sys.stdin.read())))
    except InputError as exc:
        fields = {"field": exc.field, "problem": exc.problem, "fix": exc.fix}
        say({"input_error": fields})
        sys.exit(2)


if __name__ == "__main__":
    main()
