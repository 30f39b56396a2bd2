"""A server per A/B arm, launched from a command template and stopped for sure.

``--launch "CMD … {chunk} … {port}"`` is split with shlex (never given to a shell) and
``{chunk}`` / ``{port}`` are replaced in every word, as often as they occur, so each
server's own budget flags take it — vLLM's ``--max-num-batched-tokens {chunk}``, SGLang's
``--chunked-prefill-size {chunk}``, llama.cpp's ``--batch-size {chunk} --ubatch-size
{chunk}`` (``loadgen.flavours``) — and ``--flag={chunk}`` or ``env PORT={port} …`` work too;
other braces are left alone (a JSON argument stays as written). A template that sets a
known budget flag to a number instead of ``{chunk}`` is refused with the word to write.
The port is a free one chosen here.

Each server runs in its own process group, writes stdout and stderr to a log
file kept with the A/B's files, and is ready when ``GET /health`` answers 200. One that
exits before that, or is not ready in time, is an ``InputError`` naming ``--launch``
with the tail of its log, on one line. Stopping sends SIGTERM to the whole group, waits
a grace period, then SIGKILLs whatever is left of the group: a server that ignores
SIGTERM (vLLM with streams open may) cannot outlive the experiment, nor can the worker
processes it started.
Once stopped, its log is redacted in place (``runtime.redact``): a server may print its
own flags at start (vLLM does), the secrets of the launch command among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from loadgen.flavours import LAUNCH_PLACEHOLDERS, REGISTRY
from runfmt.ab_servers import ServerStop
from runtime import redact
from runtime.lifetime import dying_with_us
from workloads.errors import InputError

FLAG = "--launch"
HOST = "127.0.0.1"
#: Lines of a server's log quoted in an error, and the most characters they may take.
TAIL_LINES = 6
TAIL_CHARS = 600
#: How often a starting server's /health and a stopping server's group are polled.
POLL_S = 0.1


@dataclass(frozen=True)
class LaunchTemplate:
    """A command line with ``{chunk}`` and ``{port}`` to fill in per arm."""

    words: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> LaunchTemplate:
        try:
            words = tuple(shlex.split(text))
        except ValueError as exc:
            raise InputError(FLAG, f"cannot split {text!r}: {exc}", "check the quotes") from None
        if not words:
            raise InputError(FLAG, "the command is empty", 'e.g. --launch "vllm serve M …"')
        for placeholder in LAUNCH_PLACEHOLDERS:
            if not any(placeholder in word for word in words):
                raise InputError(FLAG, f"the command has no {placeholder}", _hint(words))
        return cls(words)

    def chunk_flags(self) -> list[str]:
        """The flags ``{chunk}`` is the value of (``--batch-size {chunk}``,
        ``--chunked-prefill-size={chunk}``), in order; empty when it stands elsewhere."""
        flags = []
        for before, word in zip(("", *self.words), self.words, strict=False):
            if "{chunk}" not in word:
                continue
            if word.startswith("-") and "=" in word:
                flags.append(word.split("=", 1)[0])
            elif before.startswith("-"):
                flags.append(before)
        return list(dict.fromkeys(flags))

    def command(self, chunk: int, port: int) -> list[str]:
        return [w.replace("{chunk}", str(chunk)).replace("{port}", str(port)) for w in self.words]


#: Every known server's flags that set the chunk budget (``loadgen.flavours``).
BUDGET_FLAGS = {
    flag: kind for kind in REGISTRY if not kind.engine_keys for flag in kind.chunk_flags
}


def _hint(words: tuple[str, ...]) -> str:
    """How to mend a template without a placeholder: the budget flag it sets to a number
    (``--batch-size 2048`` → ``--batch-size {chunk}``), else where each server takes it."""
    fixed = [f"{w} {{chunk}}" for w in words if w in BUDGET_FLAGS]
    if fixed:
        return f"write {' '.join(fixed)} where the budget is set, and {{port}} for the port"
    examples = ", ".join(
        f"{kind.label} {' '.join(f'{flag} {{chunk}}' for flag in kind.chunk_flags)}"
        for kind in dict.fromkeys(BUDGET_FLAGS.values())
    )
    return f"put {{chunk}} where the token budget goes ({examples}) and {{port}} for the port"


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last non-empty lines of a log, joined with `` | `` (one line for an error)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    tail = " | ".join(kept) or "(empty log)"
    return tail if len(tail) <= chars else "…" + tail[-chars:]


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie.

    A zombie (a child whose parent is gone, not yet reaped by init) still counts for
    ``killpg(pgid, 0)`` but runs nothing and cannot be killed, so on Linux the members
    are read from ``/proc``; elsewhere ``killpg`` has to do.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while being read
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


class LaunchedServer:
    """One launched server: ``start()``, ``await wait_healthy()``, ``await stop()``."""

    def __init__(self, argv: Sequence[str], port: int, log_path: Path, name: str) -> None:
        self.argv = list(argv)
        self.port = port
        self.log_path = log_path
        self.name = name
        self.url = f"http://{HOST}:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_s: float | None = None
        self.stopped: ServerStop | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        """Start the command in its own process group, output to the log file."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.started_at = time.monotonic()
        try:
            self.process = subprocess.Popen(
                dying_with_us(self.argv),  # even a SIGKILLed diagnose ab takes it along
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                # Its own process group, but not a new session: a session is its own
                # scheduler autogroup on Linux, which would weigh a busy server as much as
                # every other process together, the load generator included.
                process_group=0,
            )
        except OSError as exc:
            self._log.close()
            raise InputError(
                FLAG, f"{self.name}: cannot run {self.argv[0]!r}: {exc.strerror}"
            ) from None

    def exited(self) -> int | None:
        """The exit status when the server's main process has ended, else ``None``."""
        return None if self.process is None else self.process.poll()

    def _failure(self, problem: str) -> InputError:
        return InputError(
            FLAG,
            f"{self.name}: {problem}; log tail: {log_tail(self.log_path)}",
            f"see {self.log_path}",
        )

    async def wait_healthy(self, timeout_s: float) -> float:
        """Wait for ``GET /health`` to answer 200; seconds it took. ``InputError`` (with the
        log tail) if the server exits first or is not ready within ``timeout_s``."""
        deadline = self.started_at + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                status = self.exited()
                if status is not None:
                    raise self._failure(f"exited with status {status} before it was healthy")
                try:
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        self.ready_s = time.monotonic() - self.started_at
                        return self.ready_s
                except httpx.HTTPError:
                    pass
                if time.monotonic() >= deadline:
                    raise self._failure(f"not healthy after {timeout_s:g} s")
                await asyncio.sleep(POLL_S)

    def _group_alive(self) -> bool:
        """Whether any live process of the server's group is left (the leader reaped first)."""
        assert self.process is not None
        self.process.poll()
        return group_alive(self.process.pid)

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    async def _wait_gone(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self._group_alive():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    async def stop(self, grace_s: float) -> ServerStop:
        """SIGTERM the group, SIGKILL it after ``grace_s``; how it went (idempotent)."""
        if self.stopped is not None:
            return self.stopped
        if self.process is None:
            self.stopped = ServerStop("never started", None, 0.0)
            return self.stopped
        began = time.monotonic()
        how = "exited" if self.process.poll() is not None else "sigterm"
        if self._group_alive():
            self._signal_group(signal.SIGTERM)
            if not await self._wait_gone(grace_s):
                how = "sigkill"
                self._signal_group(signal.SIGKILL)
                await self._wait_gone(grace_s)
        self.process.wait()
        if self._log is not None:
            self._log.close()
        redact.scrub_file(self.log_path)  # a server may print its own flags (vLLM does)
        self.stopped = ServerStop(how, self.process.returncode, time.monotonic() - began)
        return self.stopped
