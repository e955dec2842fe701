"""What every typed config class shares (:mod:`concrete_jungle.params`, :mod:`concrete_jungle.suites_config`):
unknown keys and NaN / Inf are refused, and string fields may be null but never blank. Imports no torch."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["_Section", "_reject_blank", "_require_fields", "CONC_MIN", "CONC_MAX"]

#: Bounds of the Brysbaert rating scale (Conc.M), in concreteness units (defined here, with no pandas import, for the
#: config classes; :mod:`concrete_jungle.concreteness` re-exports them)
CONC_MIN = 1.0
CONC_MAX = 5.0


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _reject_blank(value: str | None, info) -> str | None:
    """Field validator shared by the config classes: a string field may be null (where typed so) but never blank.

    Raises:
        ValueError: naming the field, for an empty or whitespace-only string.
    """
    if value is not None and not value.strip():
        raise ValueError(f"{info.field_name} must not be blank")
    return value


def _require_fields(obj, need: tuple[str, ...], what: str) -> None:
    """Model-validator helper: the fields ``need`` of ``obj`` are all set, or all null (a placeholder for data this
    machine lacks, recorded as skipped when the suite is prepared).

    Raises:
        ValueError: some but not all of them are null (naming the missing ones and ``what``).
    """
    missing = [f for f in need if getattr(obj, f) is None]
    if missing and len(missing) < len(need):
        raise ValueError(f"{what} needs {missing}")
