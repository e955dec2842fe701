"""The cluster launcher (issue 21 item 4): launch/train_paper.sbatch runs the paper profile's training stage under
torchrun on every node and records it with `dvc commit`; its command line must stay the stage's own."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SBATCH = REPO / "launch" / "train_paper.sbatch"


def _stage_of(*args):
    return subprocess.run([sys.executable, "launch/stage_of.py", *args], cwd=REPO, capture_output=True, text=True)


def test_stage_of_names_the_stage_that_trains_a_family():
    sys.path.insert(0, str(REPO / "launch"))
    try:
        from stage_of import stage_of
    finally:
        sys.path.pop(0)
    assert stage_of("pipelines/paper/params.yaml", "cement") == "pipelines/paper/dvc.yaml:train_margin@cement"
    assert stage_of("pipelines/paper/params.yaml", "infonce") == "pipelines/paper/dvc.yaml:train@infonce"
    assert stage_of("pipelines/paper/params.yaml", "clip") == "pipelines/paper/dvc.yaml:train_baseline@clip"
    assert stage_of("params.yaml", "cement") == "dvc.yaml:train_margin@cement"
    with pytest.raises(ValueError, match=r"'siglip' is not a training family of pipelines/paper/params.yaml"):
        stage_of("pipelines/paper/params.yaml", "siglip")
    bad = _stage_of("pipelines/paper/params.yaml", "siglip")
    assert bad.returncode == 2 and "not a training family" in bad.stderr


def test_the_launcher_runs_the_stages_own_command_under_torchrun():
    """The torchrun line's script and arguments are the DVC stage's `cmd` (so `dvc commit` records what the stage
    would have made), and the stage it commits is one the paper pipeline declares."""
    text = SBATCH.read_text()
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    launch = re.search(r"srun torchrun \\\n(?:.*\\\n)*\s*(stages/\S+) --family \"\$FAMILY\" --params \"\$PARAMS\"",
                       text)
    assert launch and launch.group(1) == "stages/train.py"
    for flag in ("--nnodes=", "--nproc_per_node=", "--rdzv_backend=c10d", "--rdzv_endpoint=", "--rdzv_id="):
        assert flag in text, flag
    parked = yaml.safe_load((REPO / "pipelines/paper/dvc.parked.yaml").read_text())["stages"]
    for stage in ("train", "train_margin", "train_baseline"):
        assert parked[stage]["do"]["cmd"] == ("python stages/train.py --family ${item} "
                                              "--params pipelines/paper/params.yaml"), stage
    # the commit is guarded: no commit when the code or params moved during the run
    assert text.index('if [ "$BEFORE" != "$AFTER" ]') < text.index('dvc commit --force "$STAGE"')
