"""The ``prefillscope`` commands a diagnosis proposes, taken out of its prose and tried.

A finding's ``next`` is prose with commands in it (``…; then: prefillscope bench …``). A
command starts at ``prefillscope`` and runs to the end of the text or to where prose
resumes: a dash between spaces (`` — ``), an opening parenthesis after a space, a
semicolon or a backquote. What is left must split as a shell would (``shlex``); a bare
subcommand name (``prefillscope compare``) names a tool and is no command line.

``dry_run`` tries one without measuring anything: ``bench`` with ``--dry-run`` (it
resolves the workload and the target, and exits 0); ``simulate`` and ``report`` as they
are (they only read the run); ``diagnose ab`` by rendering its ``--launch`` template for
each chunk size as the A/B does (``session.launcher.LaunchTemplate``) and checking the
program it starts (after ``env VAR=VALUE …``) exists, the model path it names exists, and
the chunk size is in it.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from session.launcher import LaunchTemplate

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()"]
_END = re.compile(r" — |  —| \(|; |`|$")


def commands(text: str) -> list[list[str]]:
    """Every ``prefillscope …`` command in ``text``, split into words."""
    found = []
    for start in [m.start() for m in re.finditer(r"\bprefillscope ", text)]:
        rest = text[start:]
        quoted = False
        end = len(rest)
        for index, char in enumerate(rest):
            if char == "'":
                quoted = not quoted
            elif not quoted and _END.match(rest, index) and index > 0:
                end = index
                break
        words = shlex.split(rest[:end].rstrip(" .,:"))
        if len(words) > 2:  # `prefillscope compare` names a tool; it is no command line
            found.append(words)
    return found


def program(argv: list[str]) -> list[str]:
    """``argv`` less a leading ``env VAR=VALUE …``: the server's own command."""
    if argv[:1] != ["env"]:
        return argv
    rest = argv[1:]
    while rest and "=" in rest[0] and not rest[0].startswith("-"):
        rest = rest[1:]
    return rest


def _flag(words: list[str], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words else None


def dry_run(words: list[str], cwd: Path) -> str:
    """Try one command without measuring; return what was tried (raises on failure)."""
    assert words[0] == "prefillscope", words
    if words[1] == "bench":
        done = subprocess.run(
            [*CLI, *words[1:], "--dry-run"], cwd=cwd, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, (words, done.stderr[-2000:])
        return "bench --dry-run: exit 0"
    if words[1] in ("simulate", "report"):
        done = subprocess.run(
            [*CLI, *words[1:]], cwd=cwd, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, (words, done.stderr[-2000:])
        return f"{words[1]}: exit 0"
    if words[1:3] == ["diagnose", "ab"]:
        template = _flag(words, "--launch")
        chunks = _flag(words, "--chunks")
        assert template and chunks, words
        launch = LaunchTemplate.parse(template)  # as the A/B reads it: both placeholders
        for chunk in chunks.split(","):
            argv = program(launch.command(int(chunk), 1))
            assert shutil.which(argv[0]) or Path(argv[0]).is_file(), argv[0]
            assert chunk in argv, (chunk, argv)
            model = _flag(argv, "--model-path") or _flag(argv, "serve")
            assert model and Path(model).exists(), ("model path", model)
        return f"diagnose ab: --launch renders for chunks {chunks}; program and model exist"
    raise AssertionError(f"no dry run for {words[:3]}")
