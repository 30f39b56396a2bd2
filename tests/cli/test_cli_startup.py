"""The CLI starts without the heavy libraries: each command imports what it uses when run.

``--help`` and ``calc`` must answer at once, so building the command line (every
command's options, help and defaults) may not import numpy, pandas, scipy or aiohttp.
These are checked in a fresh interpreter, by what got imported rather than by a clock
(``benchmarks/cli_startup.py`` prints the times).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from prefillscope.commands import COMMAND_MODULES
from workloads import registry

HEAVY = ("numpy", "pandas", "scipy", "aiohttp")


def _words(module: str) -> list[str]:
    """A command module's command line: ``diagnose_ab`` is ``diagnose ab``."""
    return module.split("_")


#: Command lines that must not import HEAVY: the top help, each command's help, calc.
LIGHT_COMMANDS = [
    ["--help"],
    *([*_words(name), "--help"] for name in COMMAND_MODULES),
    ["calc", "chunks", "--budget", "512", "--decodes", "4", "--prompt", "2048", "--json"],
    ["calc", "prefix", "--prompt", "4096", "--cached-prefix", "2048", "--json"],
    ["calc", "kv", "--tokens", "1000", "--model", "llama-3.1-8b", "--json"],
]

#: Runs ``main`` on each argv in sys.argv[1] (JSON) and prints, per argv, the exit
#: status and the HEAVY modules loaded so far.
_RUN_EACH = """
import json, sys
from prefillscope.cli import main
commands, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for argv in commands:
    sys.argv = ["prefillscope", *argv]
    try:
        main()
    except SystemExit as exc:
        status = exc.code
    loaded = [m for m in heavy if m in sys.modules]
    print("RESULT", json.dumps([argv, status, loaded]), file=sys.stderr)
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )


def test_importing_the_cli_and_its_app_imports_no_heavy_library() -> None:
    imported = "import json, sys, prefillscope.cli, prefillscope.app"
    loaded = set(json.loads(_python(f"{imported}; print(json.dumps(list(sys.modules)))").stdout))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_help_and_calc_run_without_heavy_libraries() -> None:
    done = _python(_RUN_EACH, json.dumps(LIGHT_COMMANDS), json.dumps(HEAVY))
    results = [json.loads(line[7:]) for line in done.stderr.splitlines() if line[:7] == "RESULT "]
    assert [argv for argv, _, _ in results] == LIGHT_COMMANDS, done.stderr
    for argv, status, loaded in results:
        assert status == 0, (argv, done.stderr)
        assert loaded == [], f"prefillscope {' '.join(argv)} imported {loaded}"
    assert '"chunks": [508, 508, 508, 508, 16]' in done.stdout


def test_help_lists_every_command() -> None:
    cli = "from prefillscope.cli import main; main()"
    top = _python(cli, "--help")
    sub = _python(cli, "diagnose", "--help")
    assert top.returncode == sub.returncode == 0, top.stderr + sub.stderr
    for name in COMMAND_MODULES:
        *group, word = _words(name)
        where = sub if group == ["diagnose"] else top
        assert re.search(rf"^\W*{word}\s", where.stdout, re.MULTILINE), (name, where.stdout)


@pytest.mark.parametrize("module", ["prefillscope.app", "prefillscope.commands.bench"])
def test_ctrl_c_while_the_cli_loads_is_one_line_and_130(module: str) -> None:
    """A real SIGINT, delivered while ``module`` is being imported by ``main`` (the
    command line names ``bench``, whose module alone is registered then)."""
    code = f"""
import os, signal, sys
class InterruptOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), signal.SIGINT)
        return None
from prefillscope.cli import main
sys.meta_path.insert(0, InterruptOnImport())
sys.argv = ["prefillscope", "bench", "--help"]
main()
"""
    done = _python(code)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "prefillscope: error: interrupted\n"
    assert done.stdout == ""


def test_workload_names_match_the_families_without_importing_them() -> None:
    """``registry`` lists names only; each must be the family (or preset) it says."""
    for name in registry.FAMILY_NAMES:
        assert registry.family(name).name == name
    presets = {
        preset: name for name in registry.FAMILY_NAMES for preset in registry.family(name).presets
    }
    assert presets == registry.PRESET_FAMILIES
