"""Split hygiene (concrete_jungle.corpus.splits, stages/corpus.py): no corpus image is a benchmark image.

The paper profile fine-tunes on the COCO Karpathy train split with restval (Sec. 3 set-up); restval comes from COCO
val2014, which contains val2017, the SugarCrepe / SugarCrepe++ images. Image identity is the COCO id across 2014 and
2017 file names, and the Flickr photo id (file stem) for Flickr images, in separate namespaces.
"""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from PIL import Image

from concrete_jungle.corpus import splits
from concrete_jungle.corpus.loaders import load_karpathy
from concrete_jungle.corpus.splits import (
    BenchmarkImages,
    benchmark_image_ids,
    check_no_overlap,
    coco_image_id,
    exclude_benchmark_images,
    flickr_image_id,
    image_key,
    record_image_key,
)
from concrete_jungle.params import CorpusExclusion, ParamsError, load_params

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "sugarcrepe").is_dir() or not (SHARED / "coco").is_dir(),
                                  reason=f"shared real data (SugarCrepe, COCO) not found at {SHARED}")


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (2, 2)).save(path, format="JPEG")  # a real (tiny) JPEG: the loaders decode every kept image


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _sentences(*raws: str) -> list[dict]:
    return [{"raw": r} for r in raws]


# Karpathy COCO fixture: 2014 names. 391895 and 222235 are restval images that SugarCrepe also uses (2017 names).
KARPATHY_IMAGES = [
    ("train2014", "COCO_train2014_000000000009.jpg", 9, "train"),
    ("val2014", "COCO_val2014_000000391895.jpg", 391895, "restval"),  # SugarCrepe + SugarCrepe++
    ("val2014", "COCO_val2014_000000000042.jpg", 42, "restval"),
    ("val2014", "COCO_val2014_000000222235.jpg", 222235, "restval"),  # SugarCrepe only
    ("val2014", "COCO_val2014_000000000073.jpg", 73, "val"),
    ("val2014", "COCO_val2014_000000000074.jpg", 74, "test"),
]


@pytest.fixture
def bench(tmp_path: Path) -> dict:
    """Tiny dataset_coco.json (+ images), SugarCrepe / SugarCrepe++ folders (2017 names), dataset_flickr30k.json,
    and a file-name list."""
    root = tmp_path / "coco"
    images = []
    for folder, name, cid, split in KARPATHY_IMAGES:
        _touch(root / folder / name)
        images.append({"filepath": folder, "filename": name, "cocoid": cid, "split": split,
                       "sentences": _sentences(f"a photo number {cid}", f"another photo of image {cid} here")})
    karpathy = _write(root / "dataset_coco.json", {"dataset": "coco", "images": images})
    sc = tmp_path / "sugarcrepe"
    _write(sc / "replace_obj.json", {
        "0": {"filename": "000000391895.jpg", "caption": "a man on a bike", "negative_caption": "a man on a horse"},
        "1": {"filename": "000000222235.jpg", "caption": "a cat", "negative_caption": "a dog"}})
    _write(sc / "swap_att.json", {"0": {"filename": "000000000500.jpg", "caption": "x", "negative_caption": "y"}})
    _write(sc / "meta.json", {"image_root": "elsewhere", "source": "sugarcrepe"})  # not a subset: passed over
    scpp = tmp_path / "sugarcrepe_pp"
    _write(scpp / "replace_obj.json", [{"id": 0, "filename": "000000391895.jpg", "caption": "a", "caption2": "b",
                                        "negative_caption": "c"}])
    _write(scpp / "croissant_metadata.json", {"@context": {}, "name": "scpp"})
    f30k = _write(tmp_path / "flickr30k" / "dataset_flickr30k.json", {"images": [
        {"filename": "1000092795.jpg", "split": "test", "sentences": []},
        {"filename": "42.jpg", "split": "test", "sentences": []},  # Flickr photo 42, not COCO image 42
        {"filename": "10002456.jpg", "split": "train", "sentences": []}]})
    names = tmp_path / "names.txt"
    names.write_text("COCO_val2014_000000000009.jpg\n\n2513260012_03d33305cf.jpg\nscene_0001.png\n")
    return {"root": root, "karpathy": karpathy, "sugarcrepe": sc, "sugarcrepe_pp": scpp, "flickr30k": f30k,
            "names": names}


# ---------------------------------------------------------------- image identity
@pytest.mark.parametrize("name", [
    "000000391895.jpg", "COCO_val2014_000000391895.jpg", "COCO_train2014_000000391895.jpg",
    "COCO_test2015_000000391895.jpg", "../shared/data/coco/val2017/000000391895.jpg",
    "/data/coco/val2014/COCO_val2014_000000391895.JPG", Path("val2017") / "000000391895.png"])
def test_coco_ids_match_across_2014_and_2017_names(name):
    assert coco_image_id(name) == 391895
    assert image_key(name) == ("coco", 391895)


@pytest.mark.parametrize("name", ["1000092795.jpg", "1000268201_693b08cb0e.jpg", "391895.jpg", "scene_0001.png",
                                  "000000391895.txt", "COCO_val2014_391895.jpg", "0000000391895.jpg", ""])
def test_non_coco_names_have_no_coco_id(name):
    assert coco_image_id(name) is None


def test_flickr_ids_are_the_photo_id_of_the_stem():
    assert flickr_image_id("1000092795.jpg") == "1000092795"  # Flickr30k: the file stem
    assert flickr_image_id("flickr8k/images/1000268201_693b08cb0e.jpg") == "1000268201"  # Flickr8k: <id>_<secret>
    assert flickr_image_id("scene_0001.png") is None
    assert image_key("1000092795.jpg") == ("flickr", "1000092795")
    assert image_key("scene_0001.png") == ("file", "scene_0001.png")
    assert image_key("391895.jpg", "coco") == ("file", "391895.jpg")  # not a COCO name, even when told COCO
    with pytest.raises(ValueError, match="namespace"):
        image_key("1.jpg", "imagenet")


def test_record_keys_follow_the_loader_ids():
    assert record_image_key({"id": "coco_000000391895", "image": "x/COCO_val2014_000000391895.jpg"}) == \
        ("coco", 391895)
    assert record_image_key({"id": "flickr8k_1000268201_693b08cb0e", "image": "i/1000268201_693b08cb0e.jpg",
                             "source": "flickr8k"}) == ("flickr", "1000268201")
    assert record_image_key({"id": "w_00001", "image": "data/world/corpus/images/w_00001.png"}) == \
        ("file", "w_00001.png")
    with pytest.raises(ValueError, match="no 'image'"):
        record_image_key({"id": "w_1"})


# ---------------------------------------------------------------- benchmark sources
def test_benchmark_image_ids_reads_every_source(bench):
    excluded = benchmark_image_ids(CorpusExclusion(
        sugarcrepe=str(bench["sugarcrepe"]), sugarcrepe_pp=str(bench["sugarcrepe_pp"]),
        karpathy_coco=str(bench["karpathy"]), karpathy_flickr30k=str(bench["flickr30k"]),
        filenames=[str(bench["names"])]))
    by = excluded.by_source
    assert list(by) == list(splits.EXCLUSION_SOURCES)
    assert by["sugarcrepe"] == {("coco", 391895), ("coco", 222235), ("coco", 500)}  # meta.json passed over
    assert by["sugarcrepe_pp"] == {("coco", 391895)}  # croissant_metadata.json passed over
    assert by["karpathy_coco_test_val"] == {("coco", 73), ("coco", 74)}
    assert by["karpathy_flickr30k_test"] == {("flickr", "1000092795"), ("flickr", "42")}
    assert by["filenames"] == {("coco", 9), ("flickr", "2513260012"), ("file", "scene_0001.png")}
    assert ("coco", 391895) in excluded and excluded.sources_of(("coco", 391895)) == ["sugarcrepe", "sugarcrepe_pp"]
    assert len(excluded) == 10


def test_nothing_configured_excludes_nothing():
    excluded = benchmark_image_ids(CorpusExclusion())
    assert not excluded and excluded.by_source == {}
    recs = [{"id": "w_1", "image": "w_1.png"}]
    assert exclude_benchmark_images(recs, excluded) == (recs, {})
    check_no_overlap(recs, excluded, "world")  # no error


def test_benchmark_source_errors_name_the_source(bench, tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus.exclude.sugarcrepe: benchmark folder not found"):
        benchmark_image_ids({"sugarcrepe": str(tmp_path / "nope")})
    empty = tmp_path / "empty"
    _write(empty / "meta.json", {"image_root": "x"})
    with pytest.raises(ValueError, match="corpus.exclude.sugarcrepe_pp: no SugarCrepe-format subset JSON"):
        benchmark_image_ids({"sugarcrepe_pp": str(empty)})
    _write(tmp_path / "bad" / "add_att.json", {"0": {"filename": "000000000001.jpg"}, "1": {"caption": "x"}})
    with pytest.raises(ValueError, match="1 of 2 items lack a 'filename'"):
        benchmark_image_ids({"sugarcrepe": str(tmp_path / "bad")})
    no_test = _write(tmp_path / "k.json", {"images": [{"filename": "COCO_val2014_000000000001.jpg", "split": "train"}]})
    with pytest.raises(ValueError, match=r"no image in split\(s\) \['test', 'val'\]"):
        benchmark_image_ids({"karpathy_coco": str(no_test)})
    with pytest.raises(FileNotFoundError, match="corpus.exclude.karpathy_flickr30k: file not found"):
        benchmark_image_ids({"karpathy_flickr30k": str(tmp_path / "missing.json")})
    with pytest.raises(ValueError, match="list of file-name lists"):
        benchmark_image_ids({"filenames": str(bench["names"])})


# ---------------------------------------------------------------- exclusion and the overlap check
def test_restval_images_that_are_sugarcrepe_images_are_excluded_and_counted(bench):
    records, _ = load_karpathy(bench["karpathy"], bench["root"], ("train", "restval", "val"))
    assert [r["id"] for r in records] == ["coco_000000000009", "coco_000000391895", "coco_000000000042",
                                          "coco_000000222235", "coco_000000000073"]
    excluded = benchmark_image_ids({"sugarcrepe": str(bench["sugarcrepe"]),
                                    "sugarcrepe_pp": str(bench["sugarcrepe_pp"]),
                                    "karpathy_coco": str(bench["karpathy"])})
    kept, counts = exclude_benchmark_images(records, excluded)
    assert [r["id"] for r in kept] == ["coco_000000000009", "coco_000000000042"]
    # per source: an image in two sources counts in both; 3 corpus images were removed in all
    assert counts == {"sugarcrepe": 2, "sugarcrepe_pp": 1, "karpathy_coco_test_val": 1}
    assert len(records) - len(kept) == 3
    check_no_overlap(kept, excluded, "fixture")  # the kept records pass the safety net


def test_overlap_check_names_the_count_and_at_most_five_examples():
    excluded = BenchmarkImages({"sugarcrepe": frozenset(("coco", i) for i in range(1, 8))})
    records = [{"id": f"coco_{i:012d}", "image": f"val2014/COCO_val2014_{i:012d}.jpg"} for i in range(1, 10)]
    with pytest.raises(ValueError) as err:
        check_no_overlap(records, excluded, "corpus manifest (paper)")
    msg = str(err.value)
    assert msg.startswith("corpus manifest (paper): 7 training image(s) are benchmark images, e.g. ")
    assert msg.count("in sugarcrepe)") == 5
    assert "'coco_000000000001' (val2014/COCO_val2014_000000000001.jpg, coco 1 in sugarcrepe)" in msg
    assert "coco_000000000006" not in msg and "coco_000000000008" not in msg
    with pytest.raises(ValueError, match="1 training image"):  # a plain set of keys works too
        check_no_overlap(records, {("coco", 9)}, "x")


def test_flickr_and_coco_namespaces_do_not_collide(bench):
    excluded = benchmark_image_ids({"karpathy_flickr30k": str(bench["flickr30k"])})  # Flickr photos 1000092795, 42
    records = [
        {"id": "coco_000000000042", "image": "val2014/COCO_val2014_000000000042.jpg", "source": "coco_karpathy"},
        {"id": "flickr8k_1000092795_abcdef0123", "image": "f/1000092795_abcdef0123.jpg", "source": "flickr8k"},
        {"id": "flickr8k_1000268201_693b08cb0e", "image": "f/1000268201_693b08cb0e.jpg", "source": "flickr8k"},
    ]
    kept, counts = exclude_benchmark_images(records, excluded)
    assert [r["id"] for r in kept] == ["coco_000000000042", "flickr8k_1000268201_693b08cb0e"]
    assert counts == {"karpathy_flickr30k_test": 1}
    # the other way round: COCO benchmark images do not remove Flickr photos with the same digits
    coco_only = BenchmarkImages({"sugarcrepe": frozenset({("coco", 1000268201), ("coco", 42)})})
    kept, counts = exclude_benchmark_images(records, coco_only)
    assert [r["id"] for r in kept] == ["flickr8k_1000092795_abcdef0123", "flickr8k_1000268201_693b08cb0e"]
    assert counts == {"sugarcrepe": 1}


# ---------------------------------------------------------------- params
def test_every_profile_writes_its_exclusion_sources():
    world = load_params(REPO / "params.yaml").corpus.exclude
    assert world == CorpusExclusion()
    real = load_params(REPO / "pipelines/real/params.yaml").corpus.exclude
    assert (real.sugarcrepe, real.sugarcrepe_pp) == ("../shared/data/sugarcrepe", "../shared/data/sugarcrepe_pp")
    assert real.karpathy_coco is None and real.karpathy_flickr30k is None
    paper = load_params(REPO / "pipelines/paper/params.yaml")
    assert paper.corpus.karpathy.splits == ["train", "restval"]
    assert paper.corpus.exclude.model_dump() == {
        "sugarcrepe": "../shared/data/sugarcrepe", "sugarcrepe_pp": "../shared/data/sugarcrepe_pp",
        "karpathy_coco": "../data/coco/dataset_coco.json",
        "karpathy_flickr30k": "../data/flickr30k/dataset_flickr30k.json", "filenames": []}
    # the benchmarks the paper profile evaluates are the ones it excludes
    assert paper.corpus.exclude.sugarcrepe == paper.benchmark.sugarcrepe.dir
    assert paper.corpus.exclude.sugarcrepe_pp == paper.benchmark.sugarcrepe_pp.dir
    assert paper.corpus.exclude.karpathy_coco == paper.corpus.karpathy.dataset_json


def test_exclusion_params_are_typed(tmp_path):
    for bad, match in ((({"sugarcrepe": " "}), "sugarcrepe must not be blank"),
                       (({"flickr30k": "x.json"}), "flickr30k"),
                       (({"filenames": [""]}), "blank path")):
        with pytest.raises(ParamsError, match=match):
            load_params(REPO / "params.yaml", {"corpus": {"exclude": bad}})


# ---------------------------------------------------------------- the corpus stage
def _corpus_stage():
    spec = importlib.util.spec_from_file_location("corpus_stage_under_test", REPO / "stages" / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _karpathy_params(bench, **exclude):
    return load_params(REPO / "params.yaml", {"corpus": {
        "source": "karpathy", "heldout_fraction": 0.0,
        "karpathy": {"dataset_json": str(bench["karpathy"]), "image_root": str(bench["root"]),
                     "splits": ["train", "restval"]},
        "exclude": {k: str(v) for k, v in exclude.items()}}})


def test_corpus_stage_excludes_benchmark_images_and_counts_them(bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = _karpathy_params(bench, sugarcrepe=bench["sugarcrepe"], sugarcrepe_pp=bench["sugarcrepe_pp"],
                              karpathy_coco=bench["karpathy"])
    stats = _corpus_stage().build_corpus(params)
    assert stats["n_images"] == 2
    assert stats["excluded"] == {"sugarcrepe": 2, "sugarcrepe_pp": 1, "karpathy_coco_test_val": 0}
    assert stats["n_excluded"] == 2
    assert stats["skipped"] == {"other_split": 2}
    manifest = [json.loads(line) for line in (tmp_path / "data/world/corpus/manifest.jsonl").read_text().splitlines()]
    assert [r["id"] for r in manifest] == ["coco_000000000009", "coco_000000000042"]
    assert json.loads((tmp_path / "metrics/world/corpus.json").read_text())["excluded"] == stats["excluded"]


def test_corpus_stage_safety_net_fails_on_an_overlap(bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stage = _corpus_stage()
    monkeypatch.setattr(splits, "exclude_benchmark_images", lambda records, excluded: (list(records), {}))
    params = _karpathy_params(bench, sugarcrepe=bench["sugarcrepe"])
    with pytest.raises(ValueError, match=r"corpus manifest \(world\): 2 training image\(s\) are benchmark images, "
                                         r"e.g. 'coco_000000391895'"):
        stage.build_corpus(params)


# ---------------------------------------------------------------- the real profile on the real data
def _filenames(folder: Path) -> set[str]:
    names = set()
    for path in folder.glob("*.json"):
        data = json.loads(path.read_text())
        items = data.values() if isinstance(data, dict) else data if isinstance(data, list) else []
        names |= {it["filename"] for it in items if isinstance(it, dict) and "filename" in it}
    return names


@needs_shared
def test_real_corpus_shares_no_image_with_sugarcrepe(tmp_path, monkeypatch):
    """The real profile's corpus (COCO val2017 + the train2017 subset) after exclusion: 395 images, none of them one
    of the 1,560 SugarCrepe / 1,542 SugarCrepe++ images."""
    raw = yaml.safe_load((REPO / "pipelines/real/params.yaml").read_text())["corpus"]
    absolute = lambda p: str((REPO / p).resolve())  # noqa: E731 (the stage runs from the repository root)
    coco, exclude = raw["coco"], raw["exclude"]
    overrides = {"corpus": {
        "coco": {"captions": [absolute(p) for p in coco["captions"]], "images": [absolute(p) for p in coco["images"]],
                 "exclude_filenames": absolute(coco["exclude_filenames"]) if coco["exclude_filenames"] else None},
        "exclude": {k: (absolute(v) if isinstance(v, str) else [absolute(p) for p in v] if isinstance(v, list) else v)
                    for k, v in exclude.items()}}}
    params = load_params(REPO / "pipelines/real/params.yaml", overrides)
    monkeypatch.chdir(tmp_path)
    stats = _corpus_stage().build_corpus(params)

    sc = {coco_image_id(n) for n in _filenames(SHARED / "sugarcrepe")}
    scpp = {coco_image_id(n) for n in _filenames(SHARED / "sugarcrepe_pp")}
    assert (len(sc), len(scpp)) == (1560, 1542) and None not in sc | scpp
    manifest = [json.loads(line) for line in (tmp_path / "data/real/corpus/manifest.jsonl").read_text().splitlines()]
    ids = {coco_image_id(r["image"]) for r in manifest}
    assert None not in ids and len(ids) == len(manifest) == stats["n_images"] == 395
    assert not ids & (sc | scpp)
    assert stats["excluded"]["sugarcrepe"] == 167 and stats["excluded"]["sugarcrepe_pp"] == 164
    assert stats["n_excluded"] == 167
