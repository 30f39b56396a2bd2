"""Many ``prefillscope`` command lines, each in a process of its own, fast: one process
imports the CLI once, then forks a child per command line, which runs it as the console
script does (``prefillscope.cli.main``) with its stdout and stderr in files. For tests that
try hundreds of command lines (every ``--set`` key of every workload with absurd values),
where a fresh interpreter per case would take minutes.

``run_all([[arg, ...], ...], cwd)`` returns ``(exit status, stderr)`` per command line; a
child still running after ``timeout`` seconds is killed (status -9).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, os, signal, sys, tempfile, time
import prefillscope.app, prefillscope.cli  # imported once, before the forks
cases, timeout = json.loads(sys.stdin.read())
results = []
for argv in cases:
    err = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        out = os.open(os.devnull, os.O_WRONLY)
        os.dup2(out, 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["prefillscope", *argv]
        try:
            prefillscope.cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(code)
        except BaseException:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    until = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > until:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -9
            break
        time.sleep(0.005)
    code = status if status == -9 else os.waitstatus_to_exitcode(status)
    err.seek(0)
    results.append([code, err.read().decode(errors="replace")])
print(json.dumps(results))
"""


def run_all(cases: list[list[str]], cwd: Path, timeout: float = 30) -> list[tuple[int, str]]:
    """Each command line of ``cases`` run by a forked child; its status and stderr."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps([cases, timeout]),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout * len(cases) + 60,
        check=True,
    )
    return [(code, err) for code, err in json.loads(done.stdout)]
