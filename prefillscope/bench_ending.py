"""The last line of ``bench``: the diagnosis headline when something is supported.

After a completed run the checklist is run on it and saved as ``diagnosis.json``
(``prefillscope.run_diagnosis``; what ``report`` then shows without running it again);
when its primary finding is a cause the evidence supports (a status ``report`` shows as
bad: ``supported``, ``thrashing`` …), the run ends with that finding in one line, so the
answer is on screen without another command. A run that cannot be diagnosed, or whose
findings support nothing, ends as before.
"""

from __future__ import annotations

from pathlib import Path

from prefillscope.report.content import STATUS_TONES


def diagnosis_headline(run_dir: Path) -> str | None:
    """``diagnosis: H1 … supported (strong confidence) — why``, or ``None`` (see above)."""
    from prefillscope.run_diagnosis import diagnose_and_save

    made = diagnose_and_save(run_dir)  # the headline stands without the file
    if made is None:
        return None
    diagnosis, _ = made
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
