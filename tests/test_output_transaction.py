"""All-new or all-old outputs (issue 22 item 1): ``cli.clear_outputs`` inside ``cli.output_transaction``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from concrete_jungle.cli import clear_outputs, fresh_dir, output_transaction, run_stage


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def outs(tmp_path):
    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("old x")
    return tmp_path


def _stage(root, fail_after: int | None):
    clear_outputs(root / "a.json", root / "d", root / "new.json")
    for i, (name, text) in enumerate([("a.json", "new a"), ("new.json", "new n"), ("d/x.txt", "new x")]):
        if i == fail_after:
            raise OSError(28, "No space left on device")
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(text)


def test_a_stage_failing_part_way_leaves_every_earlier_output(outs):
    before = _tree(outs)
    for fail_after in (0, 1, 2):
        with pytest.raises(OSError, match="No space left"), output_transaction():
            _stage(outs, fail_after)
        assert _tree(outs) == before == {"a.json": "old a", "d/x.txt": "old x"}  # no new.json, no .previous


def test_a_stage_that_ends_leaves_only_new_outputs(outs):
    with output_transaction():
        _stage(outs, None)
    assert _tree(outs) == {"a.json": "new a", "new.json": "new n", "d/x.txt": "new x"}


def test_outside_a_stage_outputs_are_deleted_and_fresh_dir_joins_the_transaction(outs):
    clear_outputs(outs / "a.json", outs / "absent")
    assert _tree(outs) == {"d/x.txt": "old x"}
    with pytest.raises(KeyError), output_transaction():
        fresh_dir(outs / "d")
        (outs / "d" / "y.txt").write_text("partial")
        clear_outputs(outs / "d")  # cleared twice by one stage: the first clearing's backup is kept
        raise KeyError("fails")
    assert _tree(outs) == {"d/x.txt": "old x"}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_outputs_set_aside_by_a_killed_run_come_back_first(outs):
    # kill -9 inside a stage leaves .<name>.previous-<pid> (whole, old) beside a partial new output
    (outs / "a.json").rename(outs / f".a.json.previous-{_dead_pid()}")
    (outs / "a.json").write_text("partial")
    with output_transaction():
        clear_outputs(outs / "a.json")
        during = _tree(outs)
    assert during == {f".a.json.previous-{os.getpid()}": "old a", "d/x.txt": "old x"}  # the old one, not the partial
    assert _tree(outs) == {"d/x.txt": "old x"}  # the stage wrote nothing new: the old output is gone, as DVC does


def test_a_second_live_run_of_the_stage_is_refused_naming_the_output(outs):
    other = os.getppid()  # alive, and not this process
    (outs / "a.json").rename(outs / f".a.json.previous-{other}")
    with pytest.raises(RuntimeError, match=rf"another run \(pid {other}\) is writing .*a\.json"), output_transaction():
        clear_outputs(outs / "a.json")
    assert _tree(outs) == {f".a.json.previous-{other}": "old a", "d/x.txt": "old x"}  # the other run's, untouched


def test_an_output_that_cannot_be_put_back_is_named(outs, monkeypatch):
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("a.json") and ".previous-" in str(src):
            raise PermissionError(13, "Permission denied")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="No space left") as err, output_transaction():
        _stage(outs, 1)
    assert any(n.startswith(f"could not put back the earlier output {outs / 'a.json'}") for n in err.value.__notes__)
    assert _tree(outs)["d/x.txt"] == "old x"  # the others are put back
    monkeypatch.setattr(os, "replace", real)
    with pytest.raises(SystemExit), output_transaction():  # the next run first puts the kept one back ...
        clear_outputs(outs / "a.json")
        assert (outs / f".a.json.previous-{os.getpid()}").read_text() == "old a" and not (outs / "a.json").exists()
        (outs / "a.json").write_text("newer a")
        raise SystemExit(0)  # ... and sys.exit(0) ends a stage normally: its outputs are kept
    assert _tree(outs) == {"a.json": "newer a", "d/x.txt": "old x"}


def test_only_rank_0_touches_the_outputs(outs, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    with output_transaction():
        clear_outputs(outs / "a.json", outs / "d")
    assert _tree(outs) == {"a.json": "old a", "d/x.txt": "old x"}


def test_run_stage_restores_on_failure(outs):
    repo_params = Path(__file__).resolve().parents[1] / "params.yaml"

    def stage(params):
        _stage(outs, 1)

    with pytest.raises(OSError):
        run_stage("t", stage, argv=["--params", str(repo_params)])
    assert _tree(outs) == {"a.json": "old a", "d/x.txt": "old x"}
