"""SugarCrepe++ (ITT / TOT): verdicts by hand, the real files in ../shared/data, and scoring from fixed
embeddings."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from concrete_jungle.evaluation.sugarcrepe_pp import (
    load_sugarcrepe_pp,
    prepare_sugarcrepe_pp,
    score_sugarcrepe_pp,
    sugarcrepe_pp_verdicts,
)
from concrete_jungle.evaluation.suite import EmbeddingCache

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "sugarcrepe_pp").is_dir(),
                                  reason=f"shared SugarCrepe++ data not found at {SHARED / 'sugarcrepe_pp'}")


def _t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_verdicts_by_hand():
    image = _t([[1, 0], [1, 0], [1, 0], [1, 0]])
    pos1 = _t([[1, 0.1], [1, 0], [1, 0], [1, 0.5]])
    pos2 = _t([[1, 0.2], [0, 1], [1, 0], [1, -0.5]])
    neg = _t([[0, 1], [1, 1], [1, 0], [0.2, 1]])
    v = sugarcrepe_pp_verdicts(image, pos1, pos2, neg)
    # 0: both tasks right. 1: p2 is orthogonal to the image and to p1 -> both wrong. 2: all equal, ties -> wrong.
    # 3: ITT right (cos v,p = 0.894 > cos v,n = 0.196) but TOT wrong: cos(p1, p2) = 0.6 < cos(p1, n) = 0.614
    assert v["itt"].tolist() == [True, False, False, True]
    assert v["tot"].tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="share shape"):
        sugarcrepe_pp_verdicts(image, pos1, pos2, neg[:3])
    with pytest.raises(ValueError, match="pos2_emb row 0 is a zero vector"):
        sugarcrepe_pp_verdicts(image, pos1, torch.zeros_like(pos2), neg)


@needs_shared
def test_real_files_keep_the_544_items_with_images(tmp_path):
    items, skipped = load_sugarcrepe_pp(SHARED / "sugarcrepe_pp", SHARED / "coco" / "val2017")
    assert {k: len(v) for k, v in items.items()} == {"replace_att": 101, "replace_obj": 202, "replace_rel": 155,
                                                     "swap_att": 59, "swap_obj": 27}
    assert skipped["swap_obj"] == {"image_missing": 218}
    first = items["swap_obj"][0]
    assert first["id"] == "44" and first["filename"] == "000000007511.jpg"
    assert first["negative_caption"] == "Others flying a kite on the beach while a person runs along the sand."
    meta = prepare_sugarcrepe_pp(SHARED / "sugarcrepe_pp", SHARED / "coco" / "val2017", tmp_path / "pp")
    assert sum(meta["n_items"].values()) == 544 and meta["dropped_empty_subsets"] == []
    again, _ = load_sugarcrepe_pp(tmp_path / "pp")  # image_root from meta.json
    assert again == items


def test_score_from_fixed_embeddings(tmp_path):
    for name, colour in (("red.png", (255, 0, 0)), ("blue.png", (0, 0, 255))):
        Image.new("RGB", (8, 8), colour).save(tmp_path / name)
    items = [
        {"id": 0, "filename": "red.png", "caption": "a red box", "caption2": "a box that is red",
         "negative_caption": "a blue box"},
        {"id": 1, "filename": "blue.png", "caption": "a blue box", "caption2": "a box painted red",
         "negative_caption": "a red box"},
        {"id": 2, "filename": "missing.png", "caption": "x", "caption2": "y", "negative_caption": "z"},
    ]
    (tmp_path / "swap_att.json").write_text(json.dumps(items))
    (tmp_path / "meta.json").write_text(json.dumps({"image_root": str(tmp_path)}))
    red, blue = [1.0, 0.0], [0.0, 1.0]
    text_vec = {"a red box": red, "a box that is red": red, "a blue box": blue, "a box painted red": [1.0, -0.2]}
    images = {str(tmp_path / "red.png"): red, str(tmp_path / "blue.png"): blue}
    cache = EmbeddingCache(list(images), list(text_vec), np.array(list(images.values()), np.float32),
                           np.array(list(text_vec.values()), np.float32))
    res = score_sugarcrepe_pp(tmp_path, cache)
    # item 0 right in both tasks; item 1: its second "positive" says red, so ITT and TOT are wrong
    assert res["verdicts"] == {"itt": {"swap_att": {"0": True, "1": False}},
                               "tot": {"swap_att": {"0": True, "1": False}}}
    assert res["metrics"]["itt"]["micro_accuracy"] == 0.5
    assert res["metrics"]["tot"]["subsets"]["swap_att"] == {"accuracy": 0.5, "n": 2, "correct": 1}
    assert res["n"] == {"swap_att": 2, "all": 2} and res["skipped"] == {"swap_att": {"image_missing": 1}}
    assert res["subset_set"] == {"scored": ["swap_att"], "absent": ["replace_att", "replace_obj", "replace_rel",
                                 "swap_obj"], "extra": [], "dropped_empty": [], "complete": False}
    (tmp_path / "replace_obj.json").write_text(json.dumps([{**items[0], "caption2": " "}]))
    with pytest.raises(ValueError, match=r"item 0 \(id 0\) lacks a non-empty string 'caption2'"):
        score_sugarcrepe_pp(tmp_path, cache)
