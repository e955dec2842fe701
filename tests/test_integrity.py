"""Integrity under faults: broken or oversized images are counted by the corpus loaders, benchmark file names stay
inside their image root, written files honour the umask, and ConcreteBatch concreteness values are checked."""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from concrete_jungle.corpus.loaders import load_coco_captions, load_flickr8k, load_karpathy
from concrete_jungle.evaluation.sugarcrepe import load_sugarcrepe, prepare_benchmark
from concrete_jungle.evaluation.sugarcrepe_pp import load_sugarcrepe_pp, prepare_sugarcrepe_pp
from concrete_jungle.io import atomic_write, check_image, confined_path, load_rgb, write_json
from concrete_jungle.training import ConcreteBatchDataset

# Image.MAX_IMAGE_PIXELS in these tests: 64 x 64 images are fine, 128 x 128 (16,384 pixels) passes the warning limit
# and 256 x 256 (65,536) the error limit (2 x 10,000).
MAX_PIXELS = 10_000
# file stem -> expected check_image verdict
KINDS = {"good": None, "empty": "image_unreadable", "truncated": "image_unreadable", "noise": "image_unreadable",
         "bomb": "image_too_large", "bomb_warning": "image_too_large"}


def _noise(size: int, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8))


def make_images(folder: Path, names: dict[str, str] | None = None) -> dict[str, Path]:
    """Write one file of each kind of :data:`KINDS` into ``folder``, named ``names[kind]`` (default ``<kind>.jpg``)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {kind: folder / (names or {}).get(kind, f"{kind}.jpg") for kind in KINDS}
    _noise(64).save(paths["good"], quality=90)
    paths["empty"].write_bytes(b"")
    data = paths["good"].read_bytes()
    paths["truncated"].write_bytes(data[: len(data) // 2])
    paths["noise"].write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    _noise(256, 2).save(paths["bomb"], quality=90)
    _noise(128, 3).save(paths["bomb_warning"], quality=90)
    return paths


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", MAX_PIXELS)


# ------------------------------------------------------------------------------------------ images
def test_check_image_names_each_fault(tmp_path, small_limit):
    paths = make_images(tmp_path)
    with Image.open(paths["truncated"]) as im:  # the header is intact: only decoding finds the truncation
        assert im.size == (64, 64)
    assert {kind: check_image(p) for kind, p in paths.items()} == KINDS
    assert check_image(tmp_path / "absent.jpg") == "image_unreadable"
    _noise(40).save(tmp_path / "ok.png")  # not a JPEG: decoded at full size
    png = (tmp_path / "ok.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(png[: len(png) // 2])
    assert check_image(tmp_path / "ok.png") is None and check_image(tmp_path / "cut.png") == "image_unreadable"
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_load_rgb_refuses_a_decompression_bomb_naming_the_file(tmp_path, small_limit):
    paths = make_images(tmp_path)
    assert load_rgb(paths["good"]).size == (64, 64)
    for kind in ("bomb", "bomb_warning"):
        with pytest.raises(ValueError, match=f"image .*{kind}.jpg is too large"):
            load_rgb(paths[kind])
    with pytest.raises(OSError, match="truncated.jpg"):
        load_rgb(paths["truncated"])


EXPECTED_SKIPS = {"image_unreadable": 3, "image_too_large": 2}


def test_coco_loader_counts_broken_images_and_names_them(tmp_path, small_limit, caplog):
    names = {kind: f"{k:012d}.jpg" for k, kind in enumerate(KINDS, 1)}
    make_images(tmp_path / "images", names)
    data = {"images": [{"id": k, "file_name": names[kind]} for k, kind in enumerate(KINDS, 1)],
            "annotations": [{"image_id": k, "caption": f"a photo number {k}"} for k in range(1, len(KINDS) + 1)]}
    write_json(tmp_path / "captions.json", data)
    with caplog.at_level(logging.WARNING, logger="concrete_jungle.corpus.loaders"):
        records, skipped = load_coco_captions(tmp_path / "captions.json", tmp_path / "images")
    assert [r["id"] for r in records] == ["coco_000000000001"]
    assert skipped == EXPECTED_SKIPS
    assert f"skipping image {tmp_path / 'images' / names['bomb']}: image_too_large" in caplog.text
    assert f"skipping image {tmp_path / 'images' / names['truncated']}: image_unreadable" in caplog.text


def test_karpathy_loader_counts_broken_images(tmp_path, small_limit):
    make_images(tmp_path / "train2014")
    data = {"images": [{"filepath": "train2014", "filename": f"{kind}.jpg", "split": "train", "cocoid": k,
                        "sentences": [{"raw": f"a photo number {k}"}]} for k, kind in enumerate(KINDS, 1)]}
    write_json(tmp_path / "dataset_coco.json", data)
    records, skipped = load_karpathy(tmp_path / "dataset_coco.json", tmp_path, ("train",))
    assert [r["id"] for r in records] == ["coco_000000000001"]
    assert skipped == EXPECTED_SKIPS


def test_flickr8k_loader_counts_broken_images(tmp_path, small_limit):
    make_images(tmp_path / "images")
    (tmp_path / "token.txt").write_text("".join(f"{kind}.jpg#0\ta photo of {kind}\n" for kind in KINDS))
    (tmp_path / "split.txt").write_text("".join(f"{kind}.jpg\n" for kind in KINDS))
    records, skipped = load_flickr8k(tmp_path / "token.txt", tmp_path / "split.txt", tmp_path / "images")
    assert [r["id"] for r in records] == ["flickr8k_good"]
    assert skipped == EXPECTED_SKIPS


# ------------------------------------------------------------------------------------------ benchmark file names
@pytest.fixture
def image_root(tmp_path) -> Path:
    """``tmp_path/images`` with ``a.png``, ``sub/b.png`` and ``inside.png`` (a symlink to ``a.png``); beside it
    ``tmp_path/x.jpg`` and the symlink ``images/out.png`` pointing to it."""
    root = tmp_path / "images"
    (root / "sub").mkdir(parents=True)
    for name in ("a.png", "sub/b.png", "../x.jpg"):
        Image.new("RGB", (4, 4), (9, 9, 9)).save(root / name)
    (root / "inside.png").symlink_to(root / "a.png")
    (root / "out.png").symlink_to(tmp_path / "x.jpg")
    return root


ESCAPING = ["../x.jpg", "/etc/passwd", "out.png", "sub/../../x.jpg"]


def test_confined_path_keeps_inside_names_and_refuses_the_others(image_root):
    assert confined_path(image_root, "sub/../a.png", "item 1") == image_root / "sub/../a.png"
    assert confined_path(image_root, "inside.png", "item 1") == image_root / "inside.png"
    for name in ESCAPING:
        with pytest.raises(ValueError, match=f"item 1: filename '{name}' is absolute or resolves outside"):
            confined_path(image_root, name, "item 1")


def _item(filename: str) -> dict:
    return {"filename": filename, "caption": "a grey square", "caption2": "a square in grey",
            "negative_caption": "a red square"}


@pytest.mark.parametrize("name", ESCAPING)
def test_sugarcrepe_refuses_a_filename_outside_the_image_root(tmp_path, image_root, name):
    bench = tmp_path / "bench"
    write_json(bench / "add_att.json", {"0": _item("a.png"), "7": _item(name)})
    message = f"SugarCrepe subset 'add_att' item '7': filename '{name}'"
    with pytest.raises(ValueError, match=message):
        load_sugarcrepe(bench, image_root)
    with pytest.raises(ValueError, match=message):
        prepare_benchmark(bench, image_root, tmp_path / "out", "test")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ESCAPING)
def test_sugarcrepe_pp_refuses_a_filename_outside_the_image_root(tmp_path, image_root, name):
    bench = tmp_path / "bench"
    write_json(bench / "replace_att.json", [{"id": "3", **_item("sub/b.png")}, {"id": "4", **_item(name)}])
    message = f"SugarCrepe\\+\\+ subset 'replace_att' item '4': filename '{name}'"
    with pytest.raises(ValueError, match=message):
        load_sugarcrepe_pp(bench, image_root)
    with pytest.raises(ValueError, match=message):
        prepare_sugarcrepe_pp(bench, image_root, tmp_path / "out")


def test_benchmark_items_inside_the_root_still_load(tmp_path, image_root):
    bench = tmp_path / "bench"
    write_json(bench / "add_att.json", {"0": _item("a.png"), "1": _item("inside.png"), "2": _item("gone.png")})
    items, skipped = load_sugarcrepe(bench, image_root)
    assert [it["image"] for it in items["add_att"]] == [str(image_root / "a.png"), str(image_root / "inside.png")]
    assert skipped == {"add_att": {"image_missing": 1}}


# ------------------------------------------------------------------------------------------ umask
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        with atomic_write(tmp_path / "b.bin", "wb") as fh:
            fh.write(b"\x00")
        assert os.umask(umask) == umask  # the write left the umask as it was
    finally:
        os.umask(old)
    assert [stat.S_IMODE(os.stat(tmp_path / n).st_mode) for n in ("a.json", "b.bin")] == [mode, mode]
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}


# ------------------------------------------------------------------------------------------ concreteness
@pytest.mark.parametrize(("c_i", "shown"), [(7.0, "7.0"), (math.nan, "nan"), (0.5, "0.5"), ("4", "'4'")])
def test_concretebatch_refuses_a_concreteness_outside_1_to_5(c_i, shown):
    good = {"anchor_id": "coco_1", "image": "a.png", "caption": "a red ball", "negative_image": "n.png",
            "negative_caption": "a blue ball", "c_i": 4.5}
    records = [good, {**good, "anchor_id": "coco_2", "c_i": c_i}]
    with pytest.raises(ValueError, match=f"record 1 \\(anchor_id 'coco_2'\\) has c_i {shown}; expected a finite"):
        ConcreteBatchDataset(records, lambda im: im, lambda t: t)
