"""The launched servers of a chunk-size A/B, one per arm (``diagnose ab --launch``).

Every arm's server is started at once, on its own free port, and waited for until all
are healthy (or all are stopped); each is stopped as ``session.launcher`` stops one
(its process group: SIGTERM, then SIGKILL after the grace period), and what it did is
recorded for ``ab.json``'s ``servers``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from diagnose.ab import Arm
from runfmt.ab_servers import ServerRecord
from session.launcher import LaunchedServer, LaunchTemplate, free_port, log_tail


class ArmServers:
    """The launched servers of the arms, by arm index."""

    def __init__(self, template: LaunchTemplate, arms: Sequence[Arm], folder: Path, grace_s: float):
        self.template = template
        self.arms = arms
        self.folder = folder
        self.grace_s = grace_s
        self.live: dict[int, LaunchedServer] = {}
        self.records: list[ServerRecord] = []

    async def start(self, indices: Sequence[int], timeout_s: float, tag: str = "") -> None:
        """Start the arms' servers at once and wait until all are healthy (or stop all)."""
        for i in indices:
            arm = self.arms[i]
            port = free_port()
            name = f"arm {arm.label} (chunk {arm.chunk})"
            log = self.folder / f"{arm.label.replace('/', '-')}{tag}.log"
            server = LaunchedServer(self.template.command(arm.chunk, port), port, log, name)
            self.live[i] = server
            server.start()
        waits = [self.live[i].wait_healthy(timeout_s) for i in indices]
        results = await asyncio.gather(*waits, return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            await self.stop(list(self.live))
            raise failure

    def url(self, index: int) -> str:
        return self.live[index].url

    def gone(self, index: int) -> str | None:
        """Why an arm's server cannot serve a trial (it exited), else ``None``."""
        server = self.live[index]
        status = server.exited()
        if status is None:
            return None
        return f"{server.name} exited with status {status}; log tail: {log_tail(server.log_path)}"

    async def stop(self, indices: Sequence[int]) -> None:
        """Stop the arms' servers (SIGTERM, then SIGKILL after the grace period). A server
        leaves ``live`` only once stopped, so a stop that was itself cancelled can be redone."""
        present = [i for i in indices if i in self.live]
        stopped = await asyncio.gather(*(self.live[i].stop(self.grace_s) for i in present))
        for index, how in zip(present, stopped, strict=True):
            server = self.live.pop(index)
            self.records.append(
                ServerRecord(
                    name=server.name,
                    command=tuple(server.argv),
                    url=server.url,
                    log=str(server.log_path),
                    pid=server.process.pid if server.process is not None else None,
                    ready_s=server.ready_s,
                    stopped=how,
                )
            )
