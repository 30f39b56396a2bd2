"""A run's diagnosis made where none is saved: ``bench`` at its end and ``report`` of a
run without ``diagnosis.json`` run the checklist (``diagnose.checklist``, its defaults,
as ``prefillscope diagnose RUN_DIR``) and save it beside the run when they can.

A run that cannot be diagnosed (one ``InputError``: no completed requests to read, a
damaged table) gives nothing; a diagnosis that cannot be saved (a full disk) is still
the answer, and the caller says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runfmt.diagnosis import Diagnosis


def diagnose_and_save(run_dir: Path) -> tuple[Diagnosis, bool] | None:
    """The run's diagnosis and whether it was saved; ``None`` when it cannot be made."""
    from diagnose.checklist import run_checklist, write_diagnosis
    from workloads.errors import InputError

    try:
        diagnosis = run_checklist(run_dir)
    except InputError:
        return None
    try:
        write_diagnosis(run_dir, diagnosis)
    except OSError:  # runtime.atomic's WriteFailed among them: the earlier file kept
        return diagnosis, False
    return diagnosis, True
