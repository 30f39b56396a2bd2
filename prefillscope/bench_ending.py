"""The last line of ``bench``: the diagnosis headline when something is supported.

After a completed run the checklist (``diagnose.checklist``, its defaults, as
``prefillscope diagnose RUN_DIR``) is run on it and saved as ``diagnosis.json`` (what
``report`` then shows without running it again); when its primary finding is a cause the
evidence supports (a status ``report`` shows as bad: ``supported``, ``thrashing`` …), the
run ends with that finding in one line, so the answer is on screen without another
command. A run that cannot be diagnosed, or whose findings support nothing, ends as before.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from prefillscope.report.content import STATUS_TONES


def diagnosis_headline(run_dir: Path) -> str | None:
    """``diagnosis: H1 … supported (strong confidence) — why``, or ``None`` (see above)."""
    from diagnose.checklist import run_checklist, write_diagnosis
    from workloads.errors import InputError

    try:
        diagnosis = run_checklist(run_dir)
    except InputError:
        return None
    with contextlib.suppress(OSError):  # the headline stands without the file
        write_diagnosis(run_dir, diagnosis)
    primary = diagnosis.primary
    if primary is None or not primary.finding:
        return None
    finding = next((f for f in diagnosis.findings() if f.id == primary.finding), None)
    if finding is None or STATUS_TONES.get(finding.status) != "bad":
        return None
    why = f" — {primary.why}" if primary.why else ""
    return (
        f"diagnosis: {finding.id} {finding.title}: {finding.status} "
        f"({primary.confidence} confidence){why}"
    )
