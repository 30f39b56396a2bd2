"""The command line of the local process that serves a port: how the server under test
was started, so that the commands a diagnosis proposes start the same server again.

Only for a server on this machine (a loopback address) and only on Linux: the listening
socket of the port is found in ``/proc/net/tcp`` and ``/proc/net/tcp6`` (state 0A,
LISTEN), its inode among the open files of ``/proc/*/fd``, and the process's argument
vector read from ``/proc/PID/cmdline``. Anything that cannot be read (another user's
process, no ``/proc``, a remote server) gives ``None``: unknown, never a guess.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Hosts that are this machine.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"})
_LISTEN = "0A"


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listening_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The PID of the process listening on TCP ``port`` here, or None."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port, proc)}
    if not inodes:
        return None
    for entry in sorted(proc.iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(entry / "fd" / fd) in inodes:
                    return int(entry.name)
            except OSError:
                continue
    return None


def server_command(host: str, port: int, proc: Path = Path("/proc")) -> list[str] | None:
    """The argument vector of the process serving ``host:port`` when it runs here."""
    if host not in LOOPBACK:
        return None
    pid = listening_pid(port, proc)
    if pid is None:
        return None
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    return argv or None
