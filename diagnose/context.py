"""Everything the checks share: the run, the options, the roofline, the decode gaps, the client.

Built once per diagnosis (``build_context``) so that the per-token work — splitting the
stream into gaps, sweeping the decode load, marking the gaps that overlapped a prefill —
is done once however many hypotheses use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.attribution import DecodeGaps, decode_gaps, overlapping, prefill_windows
from diagnose.client_limited import ClientHealth, read_client_health
from diagnose.inputs import RunView
from diagnose.next_steps import recorded_budget
from diagnose.roofline import Roofline, resolve_roofline
from runfmt.diagnosis import Evidence, Finding, Status
from runfmt.slo import Slo

#: Fewest pure-decode gaps worth a statistic; below it every gap is used instead.
MIN_CLEAR_GAPS = 50


@dataclass(frozen=True)
class DiagnoseOptions:
    """The ``diagnose`` flags. ``slo`` falls back to the SLO the run was benched with."""

    slo: Slo | None = None
    model: str | None = None
    gpu: str | None = None
    tensor_parallel_size: int | None = None
    max_num_batched_tokens: int | None = None
    resamples: int = 1000
    seed: int = 0


@dataclass
class Context:
    view: RunView
    options: DiagnoseOptions
    roofline: Roofline | None
    roofline_missing: list[str]
    gaps: DecodeGaps
    #: Gaps that overlapped no other request's prefill window (pure decode), or every
    #: gap when too few did.
    clear: DecodeGaps
    clear_is_pure: bool
    #: The load generator's health and its share of the latencies.
    client: ClientHealth

    def lacks_roofline(
        self, head: tuple[str, str, str], evidence: list[Evidence], missing: list[str]
    ) -> Finding:
        """The inconclusive finding of a check that needs a roofline and has none: ``head``
        is its (id, title, next step), ``evidence`` what it gathered before stopping."""
        hid, title, next_step = head
        summary = "No model and GPU to cost decode steps with: give --model and --gpu."
        missing = [*missing, *self.roofline_missing]
        return Finding(hid, title, Status.INCONCLUSIVE, summary, evidence, missing, next_step)

    @property
    def slo(self) -> Slo | None:
        if self.options.slo:
            return self.options.slo
        return self.view.info.slo or None

    @property
    def budget(self) -> tuple[int | None, str]:
        """The token budget per step (``max_num_batched_tokens``) and where it came from."""
        if self.options.max_num_batched_tokens:
            return self.options.max_num_batched_tokens, "diagnose --chunk-budget"
        engine = self.view.engine or {}
        if engine.get("max_num_batched_tokens"):
            return int(engine["max_num_batched_tokens"]), "run.json (embedded engine config)"
        return recorded_budget(self.view)


def build_context(view: RunView, options: DiagnoseOptions) -> Context:
    roofline, missing = resolve_roofline(
        view.engine,
        model=options.model,
        gpu=options.gpu,
        tensor_parallel_size=options.tensor_parallel_size,
    )
    gaps = decode_gaps(view)
    busy = overlapping(gaps, prefill_windows(view))
    pure = int((~busy).sum()) >= MIN_CLEAR_GAPS
    return Context(
        view=view,
        options=options,
        roofline=roofline,
        roofline_missing=missing,
        gaps=gaps,
        clear=gaps.subset(~busy) if pure else gaps,
        clear_is_pure=pure,
        client=read_client_health(view),
    )
