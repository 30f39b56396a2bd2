"""One example command line (or a few) for every command's ``--help``.

Kept together so that every command gets one and a test can hold them to it: they are
set as each command's epilog when the app is built, unless the command's own help
already shows examples.
"""

from __future__ import annotations

import typer

#: Command path (``"calc kv"``) → example lines.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "bench": (
        "prefillscope bench --workload multi-turn --num-requests 60",
        "prefillscope bench --endpoint localhost:8000/v1 --workload doc-qa --rate 4 --slo ttft=500",
        "prefillscope bench --endpoint http://host:8000 --dataset sharegpt:sg.json --rate 8",
    ),
    "probe": (
        "prefillscope probe http://localhost:8000",
        "prefillscope probe --file metrics.prom --flavour vllm",
    ),
    "report": ("prefillscope report runs/20260101T120000Z-multi-turn --html report.html",),
    "serve": ("prefillscope serve --port 8000 --gpu h100-sxm --max-num-batched-tokens 2048",),
    "compare": ("prefillscope compare runs/base runs/new --gate ttft_p99:+10%",),
    "calc chunks": ("prefillscope calc chunks --budget 512 --prompt 2048 --decodes 4",),
    "calc prefix": ("prefillscope calc prefix --prompt 3000 --cached-prefix 2500",),
    "calc kv": ("prefillscope calc kv --tokens 2048 --model llama-3.1-8b",),
    "diagnose run": ("prefillscope diagnose runs/20260101T120000Z-interference --slo itl=50",),
    "diagnose ab": (
        "prefillscope diagnose ab --workload interference --chunks 512,2048 "
        "--launch 'vllm serve M --port {port} --max-num-batched-tokens {chunk}'",
    ),
    "simulate": ("prefillscope simulate --workload interference --chunks 512,2048 --rate 2",),
    "sweep": (
        "prefillscope sweep --workload system-prompt --rates 1,2,4,8,16 --slo ttft=500",
        'prefillscope sweep --workload system-prompt --rates 2,4,8 --find "ttft_p90<500ms"',
    ),
    "runs": ("prefillscope runs runs/ --label gpu=h100",),
    "export": ("prefillscope export runs/20260101T120000Z-doc-qa --format csv",),
    "isolation": (
        "prefillscope isolation --engine cache_scope=global --prefix-tokens 64,256,1024",
        "prefillscope isolation --endpoint http://host:8000 --tenant-a salt:a --tenant-b salt:b "
        "--fail-on leaks",
    ),
}


def epilog(lines: tuple[str, ...]) -> str:
    """The examples as a help epilog (one line each, kept as written)."""
    return "Examples:\n\n" + "\n\n".join(f"  {line}" for line in lines)


def add_examples(app: typer.Typer, prefix: str = "") -> None:
    """Set every registered command's epilog from ``EXAMPLES`` (nested groups too)."""
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__ if info.callback else "")
        path = f"{prefix}{name}"
        if path in EXAMPLES and not info.epilog:
            info.epilog = epilog(EXAMPLES[path])
    for group in app.registered_groups:
        if group.typer_instance is not None and group.name:
            add_examples(group.typer_instance, f"{prefix}{group.name} ")
