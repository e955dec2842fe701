"""All-new or all-old outputs (issue 22 item 1): ``cli.clear_outputs`` inside ``cli.output_transaction``."""

from __future__ import annotations

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


def test_outputs_set_aside_by_a_killed_run_come_back_first(outs):
    # kill -9 inside a stage leaves .<name>.previous (whole, old) beside a partial new output
    (outs / "a.json").rename(outs / ".a.json.previous")
    (outs / "a.json").write_text("partial")
    with output_transaction():
        clear_outputs(outs / "a.json")
        during = _tree(outs)
    assert during == {".a.json.previous": "old a", "d/x.txt": "old x"}  # the old one set aside, not the partial
    assert _tree(outs) == {"d/x.txt": "old x"}  # the stage wrote nothing new: the old output is gone, as DVC does


def test_run_stage_restores_on_failure(outs):
    repo_params = Path(__file__).resolve().parents[1] / "params.yaml"

    def stage(params):
        _stage(outs, 1)

    with pytest.raises(OSError):
        run_stage("t", stage, argv=["--params", str(repo_params)])
    assert _tree(outs) == {"a.json": "old a", "d/x.txt": "old x"}
