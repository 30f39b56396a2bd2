"""How long the CLI takes to answer ``--help`` and ``calc``, against importing the heavy stack.

Every start of ``prefillscope`` builds all commands' flags, so anything a flag module
imports is paid by ``--help`` and ``calc`` too. ``tests/cli/test_cli_startup.py`` holds the
rule (no numpy, pandas, scipy or aiohttp on those paths) by what is imported; this
prints what the rule buys, measured side by side in one run: the median wall seconds of
a fresh interpreter for ``--help``, ``calc chunks --json`` and ``calc kv --json``, for
importing numpy + pandas + scipy + aiohttp alone, and for a bare interpreter, plus the
ratio of each to the heavy import.

Run: ``.venv/bin/python benchmarks/cli_startup.py [--repeat 7]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CLI = "from prefillscope.cli import main; main()"

#: name -> argv after the interpreter
CASES: dict[str, list[str]] = {
    "bare interpreter": ["-c", "pass"],
    "prefillscope --help": ["-c", CLI, "--help"],
    "prefillscope calc chunks --json": [
        *("-c", CLI, "calc", "chunks", "--budget", "512", "--decodes", "32"),
        *("--prompt", "4096", "--json"),
    ],
    "prefillscope calc kv --json": [
        "-c",
        CLI,
        "calc",
        "kv",
        "--tokens",
        "8192",
        "--model",
        "llama-3.1-8b",
        "--json",
    ],
    "import numpy pandas scipy aiohttp": [
        "-c",
        "import numpy, pandas, scipy.stats, aiohttp",
    ],
}


def wall_seconds(argv: list[str]) -> float:
    """Wall seconds of one fresh interpreter running ``argv``; a failure stops the run."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="starts per case (median shown)")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.repeat):  # interleaved, so that machine noise hits every case alike
        for name, argv in CASES.items():
            samples[name].append(wall_seconds(argv))
    medians = {name: statistics.median(times) for name, times in samples.items()}
    heavy = medians["import numpy pandas scipy aiohttp"]
    print(f"{'case':36} {'median s':>9} {'÷ heavy import':>15}")
    for name, seconds in medians.items():
        print(f"{name:36} {seconds:9.3f} {seconds / heavy:15.2f}")


if __name__ == "__main__":
    main()
