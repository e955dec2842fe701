"""analysis/compare_profiles.py: equal data stages and base, fine-tunes within tolerance or not (hand-counted)."""

import json

import pytest

from analysis.compare_profiles import compare


def _profile(root, name, clip_right):
    folder = root / "data" / name / "verdicts" / "sugarcrepe"
    folder.mkdir(parents=True)
    items = [f"i{k:03d}" for k in range(100)]
    base = {"replace_att": {i: k % 2 == 0 for k, i in enumerate(items)}}
    clip = {"replace_att": {i: k < clip_right for k, i in enumerate(items)}}
    for model, verdicts in (("base", base), ("clip", clip)):
        (folder / f"{model}.json").write_text(json.dumps({"suite": "sugarcrepe", "model": model,
                                                         "verdicts": verdicts}))


def test_within_tolerance_and_not(tmp_path):
    _profile(tmp_path, "world", clip_right=60)
    _profile(tmp_path, "near", clip_right=63)  # 3 items more, all one way: McNemar p = 2 * 0.5**3 = 0.25
    _profile(tmp_path, "far", clip_right=70)  # 10 more: p = 2 * 0.5**10 = 0.00195
    near = compare("world", "near", root=tmp_path)
    assert near["base_verdicts_identical"]
    (row,) = [r for r in near["comparisons"] if r["model"] == "clip"]
    assert (row["accuracy_a"], row["accuracy_b"], row["delta_points"], row["only_b"]) == (60.0, 63.0, 3.0, 3)
    assert row["mcnemar_p"] == pytest.approx(0.25) and near["fine_tunes_within_tolerance"]
    far = compare("world", "far", root=tmp_path)
    assert far["min_holm_p"] == pytest.approx(2 * 0.5 ** 10) and not far["fine_tunes_within_tolerance"]
    assert far["max_abs_delta_points"] == 10.0
    with pytest.raises(ValueError, match="no verdicts of world and nothing"):
        compare("world", "nothing", root=tmp_path)
