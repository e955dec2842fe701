"""Tests for concrete_jungle.corpus.loaders: anchors, COCO / Karpathy / Flickr8k loading, skip counts."""

import json
from pathlib import Path

import pytest
from PIL import Image

from concrete_jungle.corpus.loaders import (
    load_coco_captions,
    load_flickr8k,
    load_karpathy,
    read_filename_list,
    select_anchor,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (2, 2)).save(path, format="JPEG")  # a real (tiny) JPEG: the loaders decode every kept image


# ---------------------------------------------------------------- select_anchor
def test_select_anchor_most_words_wins_over_characters():
    assert select_anchor(["a b c d", "longword evenlongerword"]) == "a b c d"


def test_select_anchor_tie_on_words_goes_to_more_characters():
    assert select_anchor(["a dog runs", "a puppy runs", "cat"]) == "a puppy runs"


def test_select_anchor_full_tie_goes_to_first():
    assert select_anchor(["ab cd", "ef gh", "ij kl"]) == "ab cd"


def test_select_anchor_counts_whitespace_words_not_punctuation():
    # "a man , a dog ." has 6 whitespace words; "a man with a red hat" also 6 but 20 chars > 15
    assert select_anchor(["a man , a dog .", "a man with a red hat"]) == "a man with a red hat"


def test_select_anchor_empty_raises():
    with pytest.raises(ValueError, match="empty"):
        select_anchor([])


# ---------------------------------------------------------------- COCO fixture
def _coco_fixture(tmp_path: Path) -> tuple[Path, Path]:
    img_dir = tmp_path / "val2017"
    for name in ("000000000001.jpg", "000000000002.jpg", "000000000003.jpg", "000000000005.jpg"):
        _touch(img_dir / name)
    data = {
        "images": [
            {"id": 1, "file_name": "000000000001.jpg"},
            {"id": 2, "file_name": "000000000002.jpg"},  # excluded (SugarCrepe)
            {"id": 3, "file_name": "000000000003.jpg"},  # only a blank caption -> no_caption
            {"id": 4, "file_name": "000000000004.jpg"},  # file absent -> image_missing
            {"id": 5, "file_name": "000000000005.jpg"},
        ],
        "annotations": [
            {"image_id": 1, "id": 10, "caption": "A dog on a sofa."},
            {"image_id": 1, "id": 11, "caption": "A brown dog sleeping on a red sofa.\n"},
            {"image_id": 2, "id": 12, "caption": "A cat."},
            {"image_id": 3, "id": 13, "caption": "   "},
            {"image_id": 4, "id": 14, "caption": "A bus."},
            {"image_id": 5, "id": 15, "caption": "Two  birds"},
            {"image_id": 99, "id": 16, "caption": "orphan caption"},
        ],
    }
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(data))
    return path, img_dir


def test_load_coco_captions_fixture(tmp_path):
    path, img_dir = _coco_fixture(tmp_path)
    records, skipped = load_coco_captions(path, img_dir, exclude_filenames=["000000000002.jpg"])
    assert [r["id"] for r in records] == ["coco_000000000001", "coco_000000000005"]
    first = records[0]
    assert first == {
        "id": "coco_000000000001",
        "image": str(img_dir / "000000000001.jpg"),
        "captions": ["A dog on a sofa.", "A brown dog sleeping on a red sofa."],
        "anchor": "A brown dog sleeping on a red sofa.",
        "source": "coco",
    }
    assert records[1]["captions"] == ["Two birds"]  # whitespace collapsed
    assert skipped == {
        "caption_unknown_image": 1,
        "image_missing": 1,
        "excluded": 1,
        "caption_empty": 1,
        "no_caption": 1,
    }


def test_load_coco_captions_without_exclusion_keeps_image_2(tmp_path):
    path, img_dir = _coco_fixture(tmp_path)
    records, skipped = load_coco_captions(path, img_dir, source="coco_val2017")
    assert [r["id"] for r in records] == ["coco_000000000001", "coco_000000000002", "coco_000000000005"]
    assert {r["source"] for r in records} == {"coco_val2017"}
    assert "excluded" not in skipped


def test_load_coco_captions_bad_inputs(tmp_path):
    path, img_dir = _coco_fixture(tmp_path)
    with pytest.raises(FileNotFoundError, match="image folder"):
        load_coco_captions(path, tmp_path / "nope")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"images": []}))
    with pytest.raises(ValueError, match="annotations"):
        load_coco_captions(bad, img_dir)
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.jpg"}, {"id": 1, "file_name": "b.jpg"}], "annotations": []}))
    with pytest.raises(ValueError, match="duplicate image id 1"):
        load_coco_captions(dup, img_dir)


# ---------------------------------------------------------------- Karpathy fixture
def test_load_karpathy_fixture(tmp_path):
    root = tmp_path / "coco"
    _touch(root / "train2014" / "COCO_train2014_000000000009.jpg")
    _touch(root / "val2014" / "COCO_val2014_000000000042.jpg")
    _touch(root / "val2014" / "COCO_val2014_000000000077.jpg")
    _touch(root / "val2014" / "COCO_val2014_000000000088.jpg")
    sents = lambda *xs: [{"raw": x, "tokens": x.lower().split()} for x in xs]  # noqa: E731
    data = {
        "dataset": "coco",
        "images": [
            {"filepath": "train2014", "filename": "COCO_train2014_000000000009.jpg", "split": "train",
             "cocoid": 9, "sentences": sents("A plate of food.", "A plate with broccoli and rice on it.")},
            {"filepath": "val2014", "filename": "COCO_val2014_000000000042.jpg", "split": "restval",
             "cocoid": 42, "sentences": sents("A man surfing a wave.")},
            {"filepath": "val2014", "filename": "COCO_val2014_000000000077.jpg", "split": "restval",
             "cocoid": 77, "sentences": sents("A red bus.")},  # excluded via its val2017 name
            {"filepath": "val2014", "filename": "COCO_val2014_000000000088.jpg", "split": "test",
             "cocoid": 88, "sentences": sents("A kite.")},  # other split
            {"filepath": "train2014", "filename": "COCO_train2014_000000000123.jpg", "split": "train",
             "cocoid": 123, "sentences": sents("Missing.")},  # no file
            {"filepath": "val2014", "filename": "COCO_val2014_000000000042.jpg", "split": "val",
             "cocoid": 42, "sentences": sents("dup in val")},  # other split as well
        ],
    }
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps(data))
    records, skipped = load_karpathy(path, root, exclude_filenames=["000000000077.jpg"])
    assert [r["id"] for r in records] == ["coco_000000000009", "coco_000000000042"]
    assert records[0]["anchor"] == "A plate with broccoli and rice on it."
    assert records[0]["image"] == str(root / "train2014" / "COCO_train2014_000000000009.jpg")
    assert records[1]["source"] == "coco_karpathy"
    assert skipped == {"other_split": 2, "image_missing": 1, "excluded": 1}

    records, skipped = load_karpathy(path, root, splits=("test",))
    assert [r["id"] for r in records] == ["coco_000000000088"]
    assert skipped == {"other_split": 5}
    with pytest.raises(ValueError, match="splits"):
        load_karpathy(path, root, splits="train")


# ---------------------------------------------------------------- Flickr8k fixture
def test_load_flickr8k_fixture(tmp_path):
    img_dir = tmp_path / "images"
    _touch(img_dir / "111_a.jpg")
    _touch(img_dir / "222_b.jpg")
    _touch(img_dir / "333_c.jpg")
    token = tmp_path / "Flickr8k.token.txt"
    token.write_text(
        "111_a.jpg#1\tA dog jumps over a log .\n"
        "111_a.jpg#0\tA dog .\n"
        "222_b.jpg#0\tTwo girls play on a slide in the park .\n"
        "broken line without a tab\n"
        "444_d.jpg#0\tunused\n"
        "\n"
    )
    split = tmp_path / "train.txt"
    split.write_text("111_a.jpg\n222_b.jpg\n333_c.jpg\n555_e.jpg\n")
    records, skipped = load_flickr8k(token, split, img_dir)
    assert [r["id"] for r in records] == ["flickr8k_111_a", "flickr8k_222_b"]
    assert records[0]["captions"] == ["A dog .", "A dog jumps over a log ."]  # #k order
    assert records[0]["anchor"] == "A dog jumps over a log ."
    assert records[0]["source"] == "flickr8k"
    assert skipped == {"malformed_line": 1, "no_caption": 1, "image_missing": 1}


def test_load_flickr8k_duplicate_split_entry_raises(tmp_path):
    _touch(tmp_path / "images" / "1.jpg")
    (tmp_path / "t.txt").write_text("1.jpg#0\tx\n")
    (tmp_path / "s.txt").write_text("1.jpg\n1.jpg\n")
    with pytest.raises(ValueError, match="listed twice"):
        load_flickr8k(tmp_path / "t.txt", tmp_path / "s.txt", tmp_path / "images")


# ---------------------------------------------------------------- real data
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared real data not found at {SHARED}")


@needs_shared
def test_real_coco_val2017_minus_sugarcrepe():
    excl = read_filename_list(SHARED / "sugarcrepe" / "sugarcrepe_coco_val2017_filenames.txt")
    assert len(excl) == 1560
    records, skipped = load_coco_captions(
        SHARED / "coco" / "annotations" / "captions_val2017.json", SHARED / "coco" / "val2017", excl
    )
    assert len(records) == 265
    assert skipped == {"image_missing": 5000 - 432, "excluded": 167}
    assert sum(len(r["captions"]) for r in records) == 1326
    by_id = {r["id"]: r for r in records}
    assert by_id["coco_000000508602"]["anchor"] == "A small crane stands on the roof of a car in a city area."


@needs_shared
def test_real_coco_train2017_subset():
    records, skipped = load_coco_captions(
        SHARED / "coco" / "annotations" / "captions_train2017_subset.json", SHARED / "coco" / "train2017"
    )
    assert len(records) == 130
    assert skipped == {}
    assert sum(len(r["captions"]) for r in records) == 650  # README: 5 captions per image


@needs_shared
def test_real_flickr8k_train():
    text = SHARED / "flickr8k" / "text"
    records, skipped = load_flickr8k(
        text / "Flickr8k.token.txt", text / "Flickr_8k.trainImages.txt", SHARED / "flickr8k" / "images"
    )
    assert len(records) == 753
    assert all(len(r["captions"]) == 5 for r in records)
    # 6,074 train names listed, 753 of them present; one token line of the file has 3 fields
    assert skipped == {"image_missing": 6074 - 753, "malformed_line": 1}
