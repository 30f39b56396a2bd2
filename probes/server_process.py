"""The command line of the local process that serves a port: how the server under test
was started, so that the commands a diagnosis proposes start the same server again.

Only for a server on this machine (a loopback address) and only on Linux: the listening
socket of the port is found in ``/proc/net/tcp`` and ``/proc/net/tcp6`` (state 0A,
LISTEN), its inode among the open files of ``/proc/*/fd``, and the process's argument
vector read from ``/proc/PID/cmdline``, and the settings among its environment
(``/proc/PID/environ``: the engine's own variables such as ``SGLANG_USE_CPU_ENGINE``, the
module path, offline switches; never a variable whose name is a credential's, by the
one rule of ``runtime.redact.secret_env_name``), without which the same command may not
start the same server. Anything that cannot be read (another user's process, no
``/proc``, a remote server) gives ``None``: unknown, never a guess.
"""

from __future__ import annotations

import os
from pathlib import Path

from runtime.redact import secret_env_name

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


#: Environment variables that configure a server (and so belong to how it was started):
#: the engines' own settings, offline switches, the module path, thread and device pins.
SETTING_PREFIXES = ("SGLANG_", "VLLM_", "LLAMA_", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
SETTING_NAMES = frozenset({"PYTHONPATH", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"})


def server_environment(pid: int, proc: Path = Path("/proc")) -> dict[str, str]:
    """The settings among process ``pid``'s environment (``SETTING_PREFIXES``,
    ``SETTING_NAMES``), credentials (``secret_env_name``) left out; empty when it cannot
    be read."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    found = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.decode(errors="replace").partition("=")
        if not sep or secret_env_name(name):  # never recorded, whatever its prefix
            continue
        if name in SETTING_NAMES or name.startswith(SETTING_PREFIXES):
            found[name] = value
    return dict(sorted(found.items()))


def server_process(
    host: str, port: int, proc: Path = Path("/proc")
) -> tuple[list[str], dict[str, str]] | None:
    """The argument vector and the settings of the environment of the process serving
    ``host:port`` when it runs here."""
    if host not in LOOPBACK:
        return None
    pid = listening_pid(port, proc)
    if pid is None:
        return None
    argv = _argv(pid, proc)
    return (argv, server_environment(pid, proc)) if argv else None


def _argv(pid: int, proc: Path) -> list[str] | None:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part] or None
