"""How the report scales with run size: load and render time, page size, points drawn.

Builds synthetic run directories (the generator of ``tests/support/rundirs.py``: one-hour
runs, log-normal token gaps, 2 % long prompts, an embedded-engine pool) of growing size
and prints, for each, seconds to load the run, seconds to render the HTML, the page's
size and the dots the two scatter plots hold. The page should stay flat in size while
load time grows with the number of token gaps.

Run: ``.venv/bin/python benchmarks/report_scale.py [--requests 1000,10000,100000] [--tokens 20]``
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from rundirs import large_run

from prefillscope.report.data import load_report_data
from prefillscope.report.html import render_html


def measure(requests: int, tokens: int, folder: Path) -> dict[str, float]:
    run = large_run(folder / f"run-{requests}", requests, tokens)
    t0 = time.perf_counter()
    data = load_report_data(run)
    t1 = time.perf_counter()
    page = render_html(data)
    t2 = time.perf_counter()
    return {
        "requests": requests,
        "gaps": data.gaps.gap_s.size,
        "load_s": t1 - t0,
        "render_s": t2 - t1,
        "page_kib": len(page.encode()) / 1024,
        "dots": len(re.findall(r"a[\d.]+,[\d.]+ 0 1,0", page)) // 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", default="1000,10000,100000")
    parser.add_argument("--tokens", type=int, default=20, help="output tokens per request")
    args = parser.parse_args()
    print(f"{'requests':>9} {'gaps':>10} {'load s':>7} {'render s':>8} {'page KiB':>9} {'dots':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.requests.split(",")):
            r = measure(n, args.tokens, Path(tmp))
            print(
                f"{r['requests']:>9,} {r['gaps']:>10,} {r['load_s']:>7.2f} {r['render_s']:>8.2f}"
                f" {r['page_kib']:>9.0f} {r['dots']:>6,}"
            )


if __name__ == "__main__":
    main()
