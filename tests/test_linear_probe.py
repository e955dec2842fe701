"""Linear-probe suite (paper Tab. 3: ImageNet-1k top-1 / top-5, COCO mAP, VTAB-1k): the VTAB-1k protocol on toy
features with hand-known answers, mAP by hand, VTAB groups, the readers on fixtures (ImageFolder, VTAB-1k txt files,
COCO instances), the scene-world tasks, prepare / score on fixed embeddings and the real CIFAR-10 sampling."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.corpus.scene_world.graph import Scene, scene_signature
from concrete_jungle.evaluation import linear_probe as P
from concrete_jungle.evaluation.suite import EmbeddingCache
from concrete_jungle.params import ProbeParams, ProbeTask, WorldConfig

WORLD = WorldConfig()
CS = [0.01, 0.1, 1.0, 10.0, 100.0]


def _blobs(rng, n_per, centres, scale=0.3):
    x = np.concatenate([c + scale * rng.normal(size=(n_per, len(c))) for c in centres])
    return x, np.repeat(np.arange(len(centres)), n_per)


def _no_hits(r):
    return {k: v for k, v in r.items() if k != "hits"}


# ------------------------------------------------------------------------------------------------
# the VTAB-1k protocol
# ------------------------------------------------------------------------------------------------
def test_separable_probe_is_perfect_and_deterministic():
    rng = np.random.default_rng(0)
    centres = 4 * np.eye(5)[:3]
    x, y = _blobs(rng, 20, centres)
    xt, yt = _blobs(rng, 10, centres)
    r = P.vtab_linear_probe(x, y, xt, yt, CS, val_size=15, seed=0)
    assert r["top1"] == 1.0 and "top5" not in r  # 3 classes: no top-5
    # every C is perfect on validation: a plateau, so the grid is not widened (no end is strictly best), the tie
    # goes to the smallest C and the choice is not flagged as cut off by a bound
    assert r["C"] == min(CS) and r["C_at_edge"] is None
    assert list(r["val_top1"]) == [f"{c:g}" for c in sorted(CS)]
    assert set(r["val_top1"].values()) == {1.0}
    assert (r["n_train"], r["n_fit"], r["n_val"], r["n_test"], r["n_classes"]) == (60, 45, 15, 30, 3)
    assert r["hits"].dtype == bool and r["hits"].all() and r["converged"]
    r2 = P.vtab_linear_probe(x, y, xt, yt, CS, val_size=15, seed=0)
    assert _no_hits(r2) == _no_hits(r) and (r2["hits"] == r["hits"]).all()


def test_c_is_chosen_on_the_validation_split():
    rng = np.random.default_rng(1)
    # 75 / 25 imbalance: with C = 1e-6 the weights vanish and the free intercept predicts the majority class, so the
    # stratified 20-row validation split (15 + 5) scores 15 / 20; C = 1 separates it
    x = np.concatenate([[1.0, 0, 0] + 0.1 * rng.normal(size=(75, 3)), [-1.0, 0, 0] + 0.1 * rng.normal(size=(25, 3))])
    y = np.r_[np.zeros(75, int), np.ones(25, int)]
    r = P.vtab_linear_probe(x, y, x, y, [1e-6, 1.0], val_size=20, seed=0)
    # C = 1 is the grid's top: the search tries 10, which ties it, so 1 is chosen and interior
    assert r["val_top1"] == {"1e-06": 0.75, "1": 1.0, "10": 1.0}
    assert r["C"] == 1.0 and r["C_at_edge"] is None and r["top1"] == 1.0


def test_refit_uses_all_training_rows():
    rng = np.random.default_rng(2)
    centres = 4 * np.eye(3)
    x, y = _blobs(rng, 10, centres)
    # class 2 appears only in the validation rows: the C-selection fits never see it (val accuracy = the 5 class-0
    # rows of 15 validation rows), the refit on all 30 rows does, so the class-2 test images are right
    val = np.zeros(30, bool)
    val[20:] = True  # the 10 class-2 rows
    val[:5] = True  # 5 of the class-0 rows
    xt, yt = _blobs(rng, 5, centres)
    r = P.vtab_linear_probe(x, y, xt, yt, [0.1, 1.0], val_size=10, seed=0, val_mask=val)
    # 0.1 ties 1: a plateau, no end strictly best, so the grid is not widened and the tie goes to 0.1
    assert r["val_top1"] == {"0.1": 1 / 3, "1": 1 / 3} and r["C"] == 0.1 and r["C_at_edge"] is None
    assert (r["n_fit"], r["n_val"], r["n_train"]) == (15, 15, 30)
    assert r["top1"] == 1.0 and r["hits"][yt == 2].all()


def test_select_c_widens_until_the_choice_is_interior():
    seen = []

    def peak_at(c_best):
        def evaluate(C):
            seen.append(C)
            return -abs(np.log10(C) - np.log10(c_best)), True
        return evaluate

    # the optimum lies above the grid: 100, 1000 and 10000 are tried, 1000 wins, interior
    r = P.select_c(peak_at(1e3), [0.1, 1.0, 10.0])
    assert seen == [0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert r["C"] == 1000.0 and r["C_at_edge"] is None and list(r["val"]) == seen and r["converged"]
    # below the grid, and a fit that did not converge is reported
    r = P.select_c(lambda C: (-abs(np.log10(C) + 3), C > 0.01), [0.1, 1.0])
    assert r["C"] == 1e-3 and list(r["val"]) == [1e-4, 1e-3, 0.01, 0.1, 1.0] and r["converged"] is False
    # a score that keeps rising stops at the bound and says so
    r = P.select_c(lambda C: (C, True), [0.1, 1.0, 10.0], bounds=(1e-6, 1e3))
    assert r["C"] == 1e3 and r["C_at_edge"] == "high" and list(r["val"]) == [0.1, 1.0, 10.0, 100.0, 1000.0]
    # a one-value grid is widened once each way; a flat score is a plateau: no further widening, not flagged
    r = P.select_c(lambda C: (1.0, True), [1.0], bounds=(0.01, 100.0))
    assert r["C"] == 0.1 and r["C_at_edge"] is None and list(r["val"]) == [0.1, 1.0, 10.0]
    # a plateau reaching the low end after a strict rise: widening stops at the first tie (the old rule, "ties to the
    # smaller C, widen while the best is an end", walked down to the bound and flagged "low")
    r = P.select_c(lambda C: (min(C, 1.0), True), [1.0, 10.0, 100.0])
    assert r["C"] == 1.0 and r["C_at_edge"] is None and list(r["val"]) == [1.0, 10.0, 100.0]
    r = P.select_c(lambda C: (-C, True), [1.0, 10.0], bounds=(0.01, 100.0))
    assert r["C"] == 0.01 and r["C_at_edge"] == "low" and list(r["val"]) == [0.01, 0.1, 1.0, 10.0]
    # a step too small to move in 12 significant digits ends the search instead of looping on the same C
    r = P.select_c(lambda C: (C, True), [1.0], step=1 + 1e-14)
    assert list(r["val"]) == [1.0] and r["C_at_edge"] == "low"
    with pytest.raises(ValueError, match="bounds"):
        P.select_c(lambda C: (1.0, True), [1.0], bounds=(1.0, 0.1))
    with pytest.raises(ValueError, match=r"the validation score at C = 10 is nan"):
        P.select_c(lambda C: (float("nan") if C > 1 else 1.0, True), [1.0, 10.0])
    with pytest.raises(ValueError, match="distinct to 6 significant digits"):  # both would be the metrics' key "1"
        P.select_c(lambda C: (1.0, True), [1.0, 1.0000001])


def test_top5_on_six_classes_by_hand():
    rng = np.random.default_rng(3)
    e = np.eye(6)
    x, y = _blobs(rng, 15, 3 * e, scale=0.2)
    # three test images of class 0: at its centre (top-1 and top-5 hit); between classes 1 and 0 (class 1 wins,
    # class 0 second: top-5 hit only); opposite its centre (class 0 scores lowest: both miss)
    xt = np.stack([3 * e[0], 3 * e[1] + e[0], -3 * e[0]])
    r = P.vtab_linear_probe(x, y, xt, [0, 0, 0], [1.0], val_size=12, seed=0)
    assert r["hits"].tolist() == [True, False, False]
    assert r["top1"] == pytest.approx(1 / 3) and r["top5"] == pytest.approx(2 / 3)


def test_unseen_test_label_is_a_miss_and_errors():
    rng = np.random.default_rng(4)
    x, y = _blobs(rng, 10, 4 * np.eye(2))
    r = P.vtab_linear_probe(x, y, x[:2], [0, 7], [1.0], val_size=4, seed=0)
    assert r["hits"].tolist() == [True, False]
    with pytest.raises(ValueError, match=r"test_x must be a finite 2-D \[N, 2\]"):
        P.vtab_linear_probe(x, y, x[:, :1], y, [1.0], val_size=4)
    with pytest.raises(ValueError, match="integer"):
        P.vtab_linear_probe(x, y.astype(float), x, y, [1.0], val_size=4)
    with pytest.raises(ValueError, match="fewer than 2 classes"):
        P.vtab_linear_probe(x, np.zeros(20, int), x, y, [1.0], val_size=4)
    with pytest.raises(ValueError, match="Cs"):
        P.vtab_linear_probe(x, y, x, y, [0.0], val_size=4)
    with pytest.raises(ValueError, match="val_size"):
        P.vtab_linear_probe(x, y, x, y, [1.0], val_size=20)
    with pytest.raises(ValueError, match="NaN"):
        P.vtab_linear_probe(np.full_like(x, np.nan), y, x, y, [1.0], val_size=4)


def test_multilabel_map_by_hand():
    # class A = (x0 > 0), class B = (x1 > 0) on a symmetric 4 x 4 grid, so A's score follows x0 and B's x1
    a = np.array([-2.0, -1.0, 1.0, 2.0])
    x = np.array([(i, j) for i in a for j in a])
    Y = np.stack([x[:, 0] > 0, x[:, 1] > 0], axis=1).astype(int)
    xt = np.array([[3.0, 1.0], [2.0, 3.0], [1.0, 2.0], [-1.0, -2.0]])
    Yt = np.array([[1, 0], [0, 1], [1, 0], [0, 1]])
    r = P.multilabel_map(x, Y, xt, Yt, [1.0], val_size=4, seed=0)
    # A ranks the test images 1, 2, 3, 4 = pos, neg, pos, neg: AP = (1/1 + 2/3) / 2 = 5/6
    # B ranks them 2, 3, 1, 4 = pos, neg, neg, pos: AP = (1/1 + 2/4) / 2 = 3/4
    assert r["map"] == pytest.approx((5 / 6 + 3 / 4) / 2)
    # the ranking, so every AP, is the same at any C: the one-value grid is widened once each way, the 4 validation
    # rows tie (mAP 1), a plateau, and the tie goes to the smallest C
    assert r["n_classes_scored"] == 2 and r["C"] == 0.1 and r["C_at_edge"] is None
    assert list(r["val_map"]) == ["0.1", "1", "10"]
    # P@1: image 1 -> A (right), 2 -> B (right), 3 -> B (wrong), 4 ties A and B (pessimistic: wrong)
    assert r["hits"].tolist() == [True, True, False, False] and r["p_at_1"] == 0.5
    # a class with no positive test image is left out of the mean
    Yt3 = np.c_[Yt, np.zeros(4, int)]
    r3 = P.multilabel_map(x, np.c_[Y, Y[:, :1]], xt, Yt3, [1.0], val_size=4, seed=0)
    assert r3["n_classes_scored"] == 2 and r3["map"] == pytest.approx(r["map"])
    with pytest.raises(ValueError, match="0/1"):
        P.multilabel_map(x, Y * 2, xt, Yt, [1.0], val_size=4)
    with pytest.raises(ValueError, match="no test image has a label"):
        P.multilabel_map(x, Y, xt, 0 * Yt, [1.0], val_size=4)


def test_vtab_tasks_and_group_means():
    assert [len(P.VTAB1K_TASKS[g]) for g in ("natural", "specialized", "structured")] == [7, 4, 8]
    names = [t for ts in P.VTAB1K_TASKS.values() for t in ts]
    assert len(set(names)) == 19 and set(P.VTAB1K_ALIASES.values()) <= set(names)
    assert P.vtab_task_group("smallnorb_azi") == "structured" and P.vtab_task_group("imagenet") is None
    g = P.vtab_group_means({"caltech101": 0.5, "dtd": 0.7, "cifar": 0.1, "eurosat": 0.9, "imagenet": 0.6},
                           groups={"imagenet": "imagenet"})
    assert g["natural"] == pytest.approx(0.4333333333) and g["specialized"] == 0.9 and g["imagenet"] == 0.6
    assert g["vtab_mean_of_groups"] == pytest.approx((0.4333333333 + 0.9) / 2)
    assert g["vtab_mean_of_tasks"] == pytest.approx(0.55) and "structured" not in g
    with pytest.raises(ValueError, match="'imagenet' is not a VTAB-1k task"):
        P.vtab_group_means({"imagenet": 0.6})


def test_world_attributes_agree_with_the_params_check():
    for a in P.WORLD_ATTRIBUTES:
        ProbeTask(format="scene_world", attribute=a)
    with pytest.raises(ValueError, match="attribute"):
        ProbeTask(format="scene_world", attribute="hue")
    with pytest.raises(ValueError, match="groups"):
        ProbeParams(tasks={"groups": {"format": "scene_world", "attribute": "shape"}})


# ------------------------------------------------------------------------------------------------
# readers on fixtures
# ------------------------------------------------------------------------------------------------
def _image(path: Path, colour=(10, 200, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(path)


def _folder(root: Path, classes=("b", "a", "c"), n=4) -> Path:
    for c in classes:
        for k in range(n):
            _image(root / c / f"{k:02d}.jpg")
    return root


def test_read_imagefolder(tmp_path):
    root = _folder(tmp_path / "train", classes=("dog", "cat"), n=2)
    _image(root / "cat" / "nested" / "z.png")
    (root / "cat" / "notes.txt").write_text("x")
    (root / "empty").mkdir()
    (root / "README").write_text("x")
    d = P.read_imagefolder(root)
    assert d.classes == ["cat", "dog"]
    assert d.images == [str(root / "cat/00.jpg"), str(root / "cat/01.jpg"), str(root / "cat/nested/z.png"),
                        str(root / "dog/00.jpg"), str(root / "dog/01.jpg")]
    assert d.labels == [0, 0, 0, 1, 1]
    assert d.skipped == {"not_an_image": 1, "empty_class": 1, "stray_file": 1}
    _image(tmp_path / "outside.jpg")
    os.symlink(tmp_path / "outside.jpg", root / "dog" / "link.jpg")
    with pytest.raises(ValueError, match=r"class 'dog'.*link\.jpg"):
        P.read_imagefolder(root)


def _vtab(tmp_path, bad_line=None) -> Path:
    task = tmp_path / "vtab-1k" / "dtd"
    rows = {"train800": [(f"images/tr{k}.jpg", k % 3) for k in range(8)],
            "val200": [(f"images/tr{k}.jpg", k % 3) for k in range(8, 11)],
            "test": [(f"images/te {k}.jpg", k % 3) for k in range(6)]}
    rows["train800val200"] = rows["train800"] + rows["val200"]
    for split, lines in rows.items():
        for rel, _ in lines:
            if rel != "images/te 5.jpg":  # one listed test image is absent
                _image(task / rel)
        text = "".join(f"{rel} {lab}\n" for rel, lab in lines)
        if bad_line and split == "test":
            text += bad_line + "\n"
        (task / f"{split}.txt").write_text(text)
    return task


def test_read_vtab1k(tmp_path):
    task = _vtab(tmp_path)
    imgs, labels, skipped = P.read_vtab1k(task, "test")
    assert imgs == [str(task / f"images/te {k}.jpg") for k in range(5)] and labels == [0, 1, 2, 0, 1]
    assert skipped == {"image_missing": 1}
    assert len(P.read_vtab1k(task, "train800val200")[0]) == 11
    with pytest.raises(ValueError, match="unknown VTAB-1k split"):
        P.read_vtab1k(task, "train")


@pytest.mark.parametrize("line, match", [("../../secret.jpg 1", r"test\.txt:7.*secret"),
                                         ("images/x.jpg cat", r"test\.txt:7: expected")])
def test_read_vtab1k_refuses_bad_lines(tmp_path, line, match):
    task = _vtab(tmp_path, bad_line=line)
    with pytest.raises(ValueError, match=match):
        P.read_vtab1k(task, "test")


def _instances(path: Path, root: Path, files, escape=False) -> Path:
    for f in files[:-1]:  # the last listed image is absent
        _image(root / f)
    cats = [{"id": 3, "name": "car"}, {"id": 1, "name": "person"}, {"id": 2, "name": "bicycle"}]
    images = [{"id": k + 1, "file_name": f} for k, f in enumerate(files)]
    if escape:
        images.append({"id": 99, "file_name": "../up.jpg"})
    # image 1: car, person (car twice); 2: bicycle; 3: none; 5, 6, ...: one or two categories; the absent last
    # image has one; image 50 does not exist
    anns = [{"image_id": 1, "category_id": 3}, {"image_id": 1, "category_id": 1}, {"image_id": 1, "category_id": 3},
            {"image_id": 2, "category_id": 2}, {"image_id": len(files), "category_id": 1},
            {"image_id": 50, "category_id": 1}]
    anns += [{"image_id": k, "category_id": c} for k in range(4, len(files))
             for c in ({k % 3 + 1} | ({3} if k % 2 else set()))]
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return path


def test_read_coco_instances(tmp_path):
    files = ["a.jpg", "b.jpg", "c.jpg", "d.jpg"]  # c has no annotation, d is absent
    js = _instances(tmp_path / "instances.json", tmp_path / "img", files)
    d = P.read_coco_instances(js, tmp_path / "img")
    assert d.classes == ["person", "bicycle", "car"]  # by category id
    assert d.images == [str(tmp_path / "img" / "a.jpg"), str(tmp_path / "img" / "b.jpg")]
    assert d.labels == [[0, 2], [1]]
    assert d.skipped == {"annotation_unknown_image": 1, "image_missing": 1, "no_label": 1}
    js = _instances(tmp_path / "bad.json", tmp_path / "img", files, escape=True)
    with pytest.raises(ValueError, match=r"image 99.*up\.jpg"):
        P.read_coco_instances(js, tmp_path / "img")


# ------------------------------------------------------------------------------------------------
# the scene world, prepare and score
# ------------------------------------------------------------------------------------------------
ATTRS = ("shape", "colour", "size", "material", "position", "count")


def _world_cfg(**extra):
    tasks = {a: {"format": "scene_world", "attribute": a, "test_size": 12} for a in ATTRS}
    return ProbeParams(tasks={**tasks, **extra}, train_size=30, val_size=6, Cs=[0.1, 10.0])


def _items(folder: Path, task: str) -> dict:
    return json.loads((folder / "tasks" / f"{task}.json").read_text())


def test_world_tasks_label_the_scene_graph(tmp_path):
    meta = P.prepare_probe(_world_cfg(), WORLD, tmp_path / "s", seed=0)
    assert meta["available"] and meta["texts"] == []
    for a in ATTRS:
        tm = meta["tasks"][a]
        assert (tm["n_train"], tm["n_val"], tm["n_test"]) == (30, 6, 12)
        item = _items(tmp_path / "s", a)
        pool = "count" if a == "count" else "single"
        scenes = json.loads((tmp_path / "s" / "scenes" / f"{pool}.json").read_text())
        for it in item["train"] + item["test"]:
            scene = Scene.from_dict(scenes[it["id"]])
            o = scene.objects[0]
            want = {"shape": o.shape, "colour": o.colour, "size": o.size, "material": o.material,
                    "position": f"{o.row},{o.col}", "count": str(len(scene.objects))}[a]
            assert item["classes"][it["label"]] == want
            assert a == "count" or len(scene.objects) == 1
            assert Path(it["image"]).is_file()
        train_sigs = {scene_signature(Scene.from_dict(scenes[it["id"]])) for it in item["train"]}
        assert not train_sigs & {scene_signature(Scene.from_dict(scenes[it["id"]])) for it in item["test"]}
    count = _items(tmp_path / "s", "count")
    assert {count["classes"][it["label"]] for it in count["train"]} == {"1", "2", "3"}
    # single-object tasks share one pool of images
    assert [it["image"] for it in _items(tmp_path / "s", "shape")["test"]] == \
        [it["image"] for it in _items(tmp_path / "s", "position")["test"]]


def test_world_tasks_are_deterministic_and_held_out(tmp_path):
    cfg = _world_cfg()
    P.prepare_probe(cfg, WORLD, tmp_path / "a", seed=0)
    P.prepare_probe(cfg, WORLD, tmp_path / "b", seed=0)
    for a in ATTRS:
        ia, ib = _items(tmp_path / "a", a), _items(tmp_path / "b", a)
        strip = lambda part: [(it["id"], it["label"], it.get("val")) for it in part]  # noqa: E731
        assert strip(ia["train"]) == strip(ib["train"]) and strip(ia["test"]) == strip(ib["test"])
    assert (tmp_path / "a/images/single/p000001.png").read_bytes() == \
        (tmp_path / "b/images/single/p000001.png").read_bytes()
    scenes = json.loads((tmp_path / "a" / "scenes" / "single.json").read_text())
    excluded = {scene_signature(Scene.from_dict(s)) for s in list(scenes.values())[::2]}
    P.prepare_probe(cfg, WORLD, tmp_path / "c", seed=0, exclude_signatures=excluded)
    for pool in ("single", "count"):
        used = json.loads((tmp_path / "c" / "scenes" / f"{pool}.json").read_text())
        assert not excluded & {scene_signature(Scene.from_dict(s)) for s in used.values()}
    other = json.loads((tmp_path / "b" / "scenes" / "single.json").read_text())
    P.prepare_probe(cfg.model_copy(update={"seed": 1}), WORLD, tmp_path / "d", seed=0)
    assert json.loads((tmp_path / "d" / "scenes" / "single.json").read_text()) != other


def test_world_task_needs_a_world_that_holds_it(tmp_path):
    with pytest.raises(ValueError, match="single-object"):
        P.prepare_probe(_world_cfg(), WORLD.model_copy(update={"min_objects": 2, "object_count_weights": None}),
                        tmp_path, seed=0)
    with pytest.raises(ValueError, match="world config"):
        P.prepare_probe(_world_cfg(), None, tmp_path, seed=0)


def test_prepare_file_tasks_and_unavailable(tmp_path):
    root = _folder(tmp_path / "folder", n=10)  # 3 classes x 10
    vtab = _vtab(tmp_path)
    coco_root = tmp_path / "coco"
    tr = _instances(tmp_path / "tr.json", coco_root, [f"t{k}.jpg" for k in range(12)])
    va = _instances(tmp_path / "va.json", coco_root, ["v0.jpg", "v1.jpg", "v2.jpg"])
    cfg = ProbeParams(train_size=12, val_size=3, Cs=[1.0], tasks={
        "folder": {"format": "imagefolder", "root": str(root), "test_size": 5},
        "full": {"format": "imagefolder", "root": str(root), "protocol": "full", "test_size": 6},
        "dtd": {"format": "vtab1k", "root": str(vtab), "test_size": 4},
        "coco": {"format": "coco_multilabel", "instances_train": str(tr), "instances_val": str(va),
                 "image_root": str(coco_root), "protocol": "full", "group": "coco"},
        "imagenet": {"format": "imagefolder", "root": str(tmp_path / "no_imagenet")},
    })
    meta = P.prepare_probe(cfg, None, tmp_path / "s", seed=0)
    t = meta["tasks"]
    assert t["imagenet"]["available"] is False and "root folder not found" in t["imagenet"]["reason"]
    folder = _items(tmp_path / "s", "folder")
    assert (t["folder"]["n_train"], t["folder"]["n_val"], t["folder"]["n_test"]) == (12, 3, 5)
    assert not {it["id"] for it in folder["train"]} & {it["id"] for it in folder["test"]}
    assert folder["classes"] == ["a", "b", "c"]
    assert all(folder["classes"][it["label"]] == it["id"].split("/")[0] for it in folder["train"] + folder["test"])
    assert (t["full"]["n_train"], t["full"]["n_test"]) == (24, 6)
    dtd = _items(tmp_path / "s", "dtd")
    assert [it["id"] for it in dtd["train"] if it["val"]] == ["images/tr8.jpg", "images/tr9.jpg", "images/tr10.jpg"]
    assert (t["dtd"]["n_train"], t["dtd"]["n_test"], t["dtd"]["group"]) == (11, 4, "natural")  # dtd: a VTAB name
    coco = _items(tmp_path / "s", "coco")
    assert coco["kind"] == "multilabel" and coco["classes"] == ["person", "bicycle", "car"]
    assert coco["test"] == [{"id": "v0.jpg", "image": str(coco_root / "v0.jpg"), "labels": [0, 2]},
                            {"id": "v1.jpg", "image": str(coco_root / "v1.jpg"), "labels": [1]}]
    assert set(meta["images"]) == {it["image"] for n in ("folder", "full", "dtd", "coco")
                                   for part in ("train", "test") for it in _items(tmp_path / "s", n)[part]}
    none = P.prepare_probe(ProbeParams(tasks={"imagenet": cfg.tasks["imagenet"]}), None, tmp_path / "n", seed=0)
    assert none["available"] is False and "imagenet: root folder not found" in none["reason"]


def test_prepare_decodes_every_probe_image_and_refuses_a_single_class_task(tmp_path):
    # issue 22: damaged images passed preparation and failed the model's encoding later; a single-class task failed
    # at scoring, after every model was trained, naming no task
    root = _folder(tmp_path / "folder", n=4)  # 3 classes x 4
    for bad in ("a/00.jpg", "c/03.jpg"):
        (root / bad).write_bytes((root / bad).read_bytes()[:40])  # truncated
    cfg = ProbeParams(train_size=6, val_size=2, Cs=[1.0], tasks={
        "folder": {"format": "imagefolder", "root": str(root), "protocol": "full", "test_size": 6}})
    meta = P.prepare_probe(cfg, None, tmp_path / "s", seed=0)
    t = meta["tasks"]["folder"]
    assert sum(v for k, v in t["skipped"].items() if k.endswith("_image_unreadable")) == 2
    assert t["n_train"] + t["n_test"] == 10
    items = _items(tmp_path / "s", "folder")
    assert not {str(root / "a/00.jpg"), str(root / "c/03.jpg")} & {it["image"] for part in ("train", "test")
                                                                    for it in items[part]}
    one = _folder(tmp_path / "one", classes=("a",), n=6)
    cfg1 = ProbeParams(train_size=4, val_size=2, Cs=[1.0], tasks={
        "single": {"format": "imagefolder", "root": str(one), "test_size": 2}})
    with pytest.raises(ValueError, match=r"probe task 'single': its 4 training images hold fewer than 2 classes "
                                         r"\(\['a'\]\)"):
        P.prepare_probe(cfg1, None, tmp_path / "s1", seed=0)


def test_score_probe_on_label_encoding_embeddings(tmp_path):
    cfg = _world_cfg().model_copy(update={"train_size": 80, "val_size": 16, "Cs": [10.0, 100.0]})
    meta = P.prepare_probe(cfg, WORLD, tmp_path / "s", seed=0)
    # an embedding that spells out every attribute (one-hot blocks): each task is linearly separable
    blocks = {a: P._world_classes(a, WORLD) for a in ATTRS}
    scenes = {}
    for pool in ("single", "count"):
        for f, s in json.loads((tmp_path / "s" / "scenes" / f"{pool}.json").read_text()).items():
            scenes[(tmp_path / "s" / "images" / pool / f).as_posix()] = Scene.from_dict(s)
    rows = []
    for path in meta["images"]:
        sc = scenes[path]
        v = []
        for a in ATTRS:
            one = np.zeros(len(blocks[a]))
            if a == "count" or len(sc.objects) == 1:
                one[blocks[a].index(P.world_label(sc, a))] = 3.0
            v.append(one)
        rows.append(np.concatenate(v))
    cache = EmbeddingCache(meta["images"], [], np.array(rows, np.float32), np.zeros((0, len(rows[0])), np.float32))
    out = P.score_probe(tmp_path / "s", cache, cfg)
    for a in ATTRS:
        m = out["metrics"][a]
        assert m["top1"] == 1.0 and out["n"][f"{a}_train"] == 80 and m["group"] == "other"
        # every C of the grid [10, 100] is perfect: a plateau, not widened, the tie to the smaller C
        assert m["C"] == 10 and m["C_at_edge"] is None and m["val_top1"] == {"10": 1.0, "100": 1.0}
        assert ("top5" in m) == (len(blocks[a]) > 5)
        assert len(out["verdicts"][a]) == 12 and all(out["verdicts"][a].values())
    assert out["metrics"]["groups"] == {"other": 1.0}
    # issue 22: a task whose training images all carry one class is refused naming the task and its file
    task_file = tmp_path / "s" / meta["tasks"]["shape"]["file"]
    item = json.loads(task_file.read_text())
    item["train"] = [{**it, "label": 0} for it in item["train"]]
    task_file.write_text(json.dumps(item))
    with pytest.raises(ValueError, match=r"fewer than 2 classes") as err:
        P.score_probe(tmp_path / "s", cache, cfg)
    assert err.value.__notes__ == [f"in probe task 'shape' ({task_file})"]


def test_score_probe_multilabel_and_unavailable(tmp_path):
    coco_root = tmp_path / "coco"
    tr = _instances(tmp_path / "tr.json", coco_root, [f"t{k}.jpg" for k in range(12)])
    cfg = ProbeParams(train_size=8, val_size=3, Cs=[1.0], tasks={
        "coco": {"format": "coco_multilabel", "instances_train": str(tr), "image_root": str(coco_root),
                 "test_size": 3, "group": "coco"},
        "gone": {"format": "vtab1k", "root": str(tmp_path / "absent")}})
    meta = P.prepare_probe(cfg, None, tmp_path / "s", seed=0)
    assert meta["tasks"]["gone"]["available"] is False
    rng = np.random.default_rng(0)
    cache = EmbeddingCache(meta["images"], [], rng.normal(size=(len(meta["images"]), 4)).astype(np.float32),
                           np.zeros((0, 4), np.float32))
    out = P.score_probe(tmp_path / "s", cache, cfg)
    m = out["metrics"]["coco"]
    assert set(m) == {"map", "p_at_1", "C", "C_at_edge", "val_map", "group"} and 0.0 <= m["map"] <= 1.0
    assert out["metrics"]["groups"] == {"coco": m["map"]} and "gone" in out["unavailable"]


# ------------------------------------------------------------------------------------------------
# real data
# ------------------------------------------------------------------------------------------------
def test_real_cifar10_vtab1k_sampling(shared_data, tmp_path):
    root = shared_data / "classification" / "cifar10_test"
    cfg = ProbeParams(tasks={"cifar10": {"format": "imagefolder", "root": str(root), "test_size": 1000}})
    meta = P.prepare_probe(cfg, None, tmp_path / "a", seed=0)
    tm = meta["tasks"]["cifar10"]
    assert (tm["n_train"], tm["n_val"], tm["n_test"], tm["n_classes"]) == (1000, 200, 1000, 10)
    item = _items(tmp_path / "a", "cifar10")
    train, test = {it["id"] for it in item["train"]}, {it["id"] for it in item["test"]}
    assert len(train) == 1000 and len(test) == 1000 and not train & test
    assert len(meta["images"]) == 2000 and all(Path(p).is_file() for p in list(meta["images"])[:20])
    val_classes = np.bincount([it["label"] for it in item["train"] if it["val"]], minlength=10)
    train_classes = np.bincount([it["label"] for it in item["train"]], minlength=10)
    assert np.abs(val_classes - train_classes / 5).max() <= 1  # stratified 800 / 200
    P.prepare_probe(cfg, None, tmp_path / "b", seed=0)
    assert _items(tmp_path / "b", "cifar10") == item


def test_probe_grid_is_refused_at_start_up_by_the_scorer_s_rule():
    # issue 22 item 3: what the scorer would refuse (a repeated C, a C outside the search's bounds) is refused when
    # the params load, naming the key
    for bad in ([1.0, 1.0], [0.0, 1.0], [1e-7], [1e7], [1.0, 1.0000001]):
        with pytest.raises(ValueError, match=r"evaluate.probe.Cs must be distinct values within 1e-06 \.\. 1e\+06"):
            ProbeParams(Cs=bad)
    assert ProbeParams(Cs=[1e-6, 1e6]).Cs == [1e-6, 1e6] and P.C_BOUNDS == (1e-6, 1e6)
    # and the scorer applies the same rule against its own bounds (one function, suites_config.check_probe_cs)
    for bad in ([1.0, 1.0], [0.5], [float("nan")], []):
        with pytest.raises(ValueError, match=r"^Cs must be distinct values within 1 \.\. 10"):
            P.select_c(lambda C: (1.0, True), bad, bounds=(1.0, 10.0))
