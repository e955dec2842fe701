"""The DVC stage that trains a family of a profile: ``python launch/stage_of.py PARAMS FAMILY`` prints e.g.
``pipelines/paper/dvc.yaml:train_margin@cement`` (the target `dvc commit` records after a torchrun launch,
launch/train_paper.sbatch).

Exits 2 naming the family and the params file when the family is none of the profile's train.losses,
train.margin_losses or train.baselines."""

from __future__ import annotations

import sys
from pathlib import Path


def stage_of(params_file: str, family: str) -> str:
    """``<dvc.yaml>:<stage>@<family>`` of ``family`` in the profile ``params_file`` (a path from the repository root).

    Raises:
        ValueError: naming the family, the params file and the families it has."""
    from concrete_jungle.params import load_params

    train = load_params(params_file).train
    for stage, families in (("train", train.losses), ("train_margin", train.margin_losses),
                            ("train_baseline", train.baselines)):
        if family in families:
            folder = Path(params_file).parent.as_posix()
            return f"{'' if folder == '.' else folder + '/'}dvc.yaml:{stage}@{family}"
    raise ValueError(f"{family!r} is not a training family of {params_file} (losses {train.losses}, margin_losses "
                     f"{train.margin_losses}, baselines {train.baselines})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python launch/stage_of.py PARAMS FAMILY")
    try:
        print(stage_of(sys.argv[1], sys.argv[2]))
    except ValueError as err:
        print(f"stage_of: {err}", file=sys.stderr)
        sys.exit(2)
