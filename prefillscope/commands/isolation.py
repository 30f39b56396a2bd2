"""``prefillscope isolation``: does a shared prefix cache leak one tenant's prompts to another?

Against ``--endpoint URL`` or, without one, the embedded engine (``--engine KEY=VALUE``,
e.g. ``cache_scope=global`` for a deployment that ignores salts). The victim
(``--tenant-a``) primes a secret prefix; the attacker (``--tenant-b``) and the victim
probe it and a fresh one, in random order, trial after trial (``session.isolation``);
the verdict is ``isolated``, ``leaks`` or ``inconclusive`` (``diagnose.isolation``).

Exit status: 0 a verdict; 1 the verdict is one of ``--fail-on`` (``leaks``,
``inconclusive``); 2 bad input; 4 ``failed``: more than a tenth of the measured requests
failed (``diagnose.isolation.MAX_FAILED_SHARE``); 6 ``isolation.json`` could not be
written; 130/143/129 stopped (``isolation.json`` written ``interrupted``). ``--json``
prints ``isolation.json``. The session, the statistics and the view are imported when the
command runs, so the CLI starts without them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from workloads.errors import InputError
from workloads.limits import MAX_TOKENS, RESAMPLES_BOUND, SEED_BOUND, Bound, check_confidence


def parse_lengths(text: str) -> tuple[int, ...]:
    """``64,256,1024`` → the prefix lengths to test, each a positive whole number."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise InputError("--prefix-tokens", f"{text!r} is not a list of token counts", "e.g. 1024")
    lengths = tuple(dict.fromkeys(int(p) for p in parts))
    for n in lengths:
        Bound(1, MAX_TOKENS, whole=True).check("--prefix-tokens", n)
    return lengths


def parse_fail_on(text: str | None) -> set[str]:
    """``leaks`` or ``leaks,inconclusive``: the verdicts that exit 1."""
    from diagnose.isolation import VERDICTS

    names = {p.strip() for p in (text or "").split(",") if p.strip()}
    unknown = names - set(VERDICTS)
    if unknown:
        raise InputError(
            "--fail-on", f"unknown verdict {sorted(unknown)[0]!r}", "use leaks, inconclusive"
        )
    return names


def isolation(
    endpoint: Annotated[
        str | None, typer.Option(help="Server to test (default: the embedded engine).")
    ] = None,
    backend: Annotated[str, typer.Option(help="auto, vllm, sglang, llamacpp or openai.")] = "auto",
    api: Annotated[str | None, typer.Option(help="completions, sglang or llamacpp.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name (default: the server's).")] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="API key (default: $PREFILLSCOPE_API_KEY or $OPENAI_API_KEY)."),
    ] = None,
    vocab_size: Annotated[int | None, typer.Option(help="Token ids below this.")] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(help="Embedded engine KEY=VALUE, e.g. cache_scope=global (repeatable)."),
    ] = None,
    tenant_a: Annotated[
        list[str] | None,
        typer.Option(help="The victim: salt:V, lora:NAME, key:V, header:N=V, user:V (repeatable)."),
    ] = None,
    tenant_b: Annotated[
        list[str] | None, typer.Option(help="The attacker, in the same forms.")
    ] = None,
    prefix_tokens: Annotated[
        str | None,
        typer.Option(help="Secret prefix lengths, e.g. 64,256,1024 (default 1024)."),
    ] = None,
    trials: Annotated[int, typer.Option(help="Trials per prefix length.")] = 30,
    warmup_trials: Annotated[int, typer.Option(help="Unmeasured trials first.")] = 1,
    secret_file: Annotated[
        Path | None, typer.Option(help="Your own secret prefix as text (tokenized by the server).")
    ] = None,
    resolution: Annotated[
        str, typer.Option(help="Smallest gap that counts: 10% (of the control's) or 2ms.")
    ] = "10%",
    seed: Annotated[int, typer.Option(help="Seed of the probe order and fresh prefixes.")] = 0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 2000,
    confidence: Annotated[float, typer.Option(help="Confidence level of intervals.")] = 0.95,
    timeout: Annotated[float, typer.Option(help="Seconds one request may take.")] = 120.0,
    out: Annotated[
        Path | None, typer.Option(help="Folder (default: runs/<time>-isolation).")
    ] = None,
    fail_on: Annotated[
        str | None, typer.Option(help="Exit 1 on these verdicts: leaks[,inconclusive].")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print isolation.json only.")] = False,
) -> None:
    """Does the prefix cache leak one tenant's prompt to another? A timed, seeded test."""
    from rich.console import Console

    from diagnose.isolation import Resolution
    from loadgen.target import api_key_from_env
    from prefillscope.engine_flags import parse_engine_flags
    from prefillscope.report.isolation import isolation_content
    from prefillscope.report.terminal import render_isolation
    from runfmt.isolation import IsolationResult
    from runtime import signals
    from session.exit_status import EXIT_REQUESTS_FAILED
    from session.isolation import IsolationOptions, run_isolation

    failing = parse_fail_on(fail_on)
    for flag, value, bound in (
        ("--trials", trials, Bound(3, 10_000, whole=True, why="trials run one after another")),
        ("--warmup-trials", warmup_trials, Bound(0, 100, whole=True)),
        ("--resamples", resamples, RESAMPLES_BOUND),
        ("--timeout", timeout, Bound(0, 3600, above=True)),
        ("--vocab-size", vocab_size, Bound(2, 2**31, whole=True)),
        ("--seed", seed, SEED_BOUND),
    ):
        bound.check(flag, value)
    check_confidence("--confidence", confidence)
    if engine and endpoint:
        raise InputError("--engine", "configures the embedded engine only", "drop --endpoint")
    options = IsolationOptions(
        endpoint=endpoint, backend=backend, api=api, model=model,
        api_key=api_key or api_key_from_env(), vocab_size=vocab_size,
        engine=parse_engine_flags(engine) if engine else None,
        tenant_a=tenant_a, tenant_b=tenant_b,
        prefix_tokens=parse_lengths(prefix_tokens) if prefix_tokens else None,
        trials=trials, warmup_trials=warmup_trials, secret_file=secret_file,
        resolution=Resolution.parse(resolution), seed=seed, resamples=resamples,
        confidence=confidence, timeout_s=timeout, out=out,
        command=["prefillscope", *sys.argv[1:]],
    )  # fmt: skip
    stream = sys.stderr if as_json else sys.stdout
    outcome = signals.run(run_isolation(options, lambda line: print(line, file=stream, flush=True)))
    if as_json:
        typer.echo(json.dumps(outcome.document, ensure_ascii=False))
    else:
        written = IsolationResult.from_json(outcome.document)  # as `report` shows the file
        render_isolation(isolation_content(written, outcome.out), Console())
    if outcome.status != "complete":
        print(
            f"prefillscope: isolation {outcome.status}: {outcome.document.get('reason')}; "
            f"the trials done are in {outcome.out}",
            file=sys.stderr,
        )
        failed = outcome.status == "failed"  # its requests failed beyond the bound
        raise typer.Exit(EXIT_REQUESTS_FAILED if failed else signals.stop_exit_code())
    raise typer.Exit(1 if outcome.verdict in failing else 0)


def register(app: typer.Typer) -> None:
    app.command("isolation")(isolation)
