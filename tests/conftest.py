"""Shared fixtures: the real-data folder beside the repo, COCO val2017 anchor records, and the --runslow switch for
slow tests."""

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow (as CI does)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow test: run with --runslow (CI does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the repository; skips the test with a reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def coco_val_records(shared_data) -> list[dict]:
    """Every COCO val2017 image as a corpus record ``{"id": "coco_<image id>", "image": "<image id>.jpg", "anchor",
    "captions"}`` (the anchor chosen as the corpus stage chooses it: ``select_anchor``), sorted by image id; skips
    the test with a reason when the captions file is absent."""
    path = shared_data / "coco" / "annotations" / "captions_val2017.json"
    if not path.is_file():
        pytest.skip(f"COCO captions absent ({path})")
    from concrete_jungle.corpus.loaders import select_anchor

    by_image: dict[int, list[str]] = {}
    for a in json.loads(path.read_text())["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a["caption"].strip())
    return [{"id": f"coco_{i}", "image": f"{i}.jpg", "anchor": select_anchor(caps), "captions": caps}
            for i, caps in sorted(by_image.items())]
