"""Parked pipelines: a pipeline that has never run here (the GPU profiles ``paper`` / ``paper_n256``) keeps its DAG
as ``dvc.parked.yaml`` instead of ``dvc.yaml`` (issue 29 item 4).

DVC collects every file named ``dvc.yaml`` in the repository, so a never-run pipeline's DAG made a fresh clone's
``dvc status`` print about 1,000 changed-dependency lines a pipeline, every ``dvc exp run`` warn "No file hash info"
about its outputs and ``dvc plots show`` fail on its plots. Parked, it is still written from the spec and checked
by ``python -m concrete_jungle.lineage write|check``; ``python -m concrete_jungle.lineage enable <name>`` makes it a
``dvc.yaml`` again (then ``dvc repro <dir>/dvc.yaml``; commit it with its lock once it has run), and ``lineage park
<name>`` parks a pipeline that has no lock.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PARKED", "pipeline_file", "move_pipeline", "parking_problems"]

#: The file name of a parked pipeline's DAG, beside where its ``dvc.yaml`` would be.
PARKED = "dvc.parked.yaml"


def pipeline_file(dvc_yaml: str, repo: Path) -> str:
    """The file that holds pipeline ``dvc_yaml`` (a path relative to ``repo``) in the checkout ``repo``:
    ``dvc_yaml`` itself, or its parked form when only that exists."""
    parked = str(Path(dvc_yaml).with_name(PARKED))
    return parked if (repo / parked).is_file() and not (repo / dvc_yaml).is_file() else dvc_yaml


def move_pipeline(dvc_yaml: str, text: str, repo: Path, *, park: bool) -> str:
    """Park (``park=True``) or un-park pipeline ``dvc_yaml`` of the checkout ``repo``: write ``text`` (the rendered
    DAG) to its other file and remove the one it had; returns the path written (relative to ``repo``).

    Raises:
        ValueError: parking a pipeline with a lock (its results would lose their DAG) or one parked already;
            un-parking one that is not parked."""
    parked = str(Path(dvc_yaml).with_name(PARKED))
    is_parked = pipeline_file(dvc_yaml, repo) == parked
    lock = Path(dvc_yaml).with_suffix(".lock")
    if park and (repo / lock).is_file():
        raise ValueError(f"pipeline {dvc_yaml} has a lock ({lock}): only a pipeline that never ran may be parked")
    if park == is_parked:
        raise ValueError(f"pipeline {dvc_yaml} is {'parked already' if park else 'not parked'}")
    new, old = (parked, dvc_yaml) if park else (dvc_yaml, parked)
    (repo / new).write_text(text)
    (repo / old).unlink()
    return new


def parking_problems(dvc_yaml: str, repo: Path) -> list[str]:
    """What ``lineage check`` reports of pipeline ``dvc_yaml``'s files: both forms present, or a parked one with a
    lock (a pipeline that has run must be a ``dvc.yaml``, or DVC would not see its lock)."""
    parked = str(Path(dvc_yaml).with_name(PARKED))
    if (repo / parked).is_file() and (repo / dvc_yaml).is_file():
        return [f"{parked} and {dvc_yaml} both exist: remove the parked one"]
    if pipeline_file(dvc_yaml, repo) == parked and (repo / dvc_yaml).with_suffix(".lock").is_file():
        return [f"{parked}: a parked pipeline has a lock; python -m concrete_jungle.lineage enable "
                f"{Path(dvc_yaml).parent.name}"]
    return []
