"""DVC stages `benchmark` and `score_benchmark`: the SugarCrepe-format compositional benchmark (scene world, or
the real SugarCrepe items whose image is present) and SugarCrepe++ when ``benchmark.sugarcrepe_pp`` names it
(paper Sec. 3, Tab. 2).

``prepare`` writes ``data/<profile>/benchmark`` (subset JSONs, ``meta.json``, ``sugarcrepe_pp/``, and the
``suite.json`` listing every image and caption to encode) and ``metrics/<profile>/benchmark.json``. ``score``
reads each model's embeddings (``embed`` stages) and writes ``metrics/<p>/evaluate/{sugarcrepe,sugarcrepe_pp}/``
and the per-item verdicts ``data/<p>/verdicts/{sugarcrepe,sugarcrepe_pp}/``.
"""

from concrete_jungle.cli import fresh_dir, run_stage
from concrete_jungle.evaluation.scoring import score_suite
from concrete_jungle.io import read_json, read_jsonl, write_json, write_metrics
from concrete_jungle.params import Params


def build_benchmark(params: Params) -> dict:
    """The scene world generates its seven subsets on scenes whose signatures never occur in the corpus; real
    SugarCrepe and SugarCrepe++ are filtered to the items whose image is present.

    Raises:
        ValueError: a benchmark item whose filename leaves its image root, or a malformed item (named).
    """
    from concrete_jungle.evaluation.sugarcrepe import benchmark_inputs, load_sugarcrepe
    from concrete_jungle.evaluation.suite import write_suite

    out = fresh_dir(params.data_dir / "benchmark")
    b = params.benchmark
    if b.source == "scene_world":
        from concrete_jungle.corpus.scene_world.benchmark import generate_benchmark
        from concrete_jungle.corpus.scene_world.graph import corpus_signatures

        corpus = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
        exclude = corpus_signatures(corpus)
        counts = generate_benchmark(params.world, b.n_per_subset, out, seed=params.seed + 1_000_003,
                                    exclude=exclude)
        skipped = read_json(out / "scenes.json").get("skipped", {}) if (out / "scenes.json").exists() else {}
        meta = {"image_root": str(out / "images"), "source": "scene_world", "n_items": counts, "skipped": skipped}
        write_json(out / "meta.json", meta)
    else:
        from concrete_jungle.evaluation.sugarcrepe import prepare_benchmark

        meta = prepare_benchmark(b.sugarcrepe.dir, b.sugarcrepe.image_root, out, source_name="sugarcrepe")
    images, texts = benchmark_inputs(load_sugarcrepe(out, decode=False)[0], ("caption", "negative_caption"))
    if b.sugarcrepe_pp is not None:
        from concrete_jungle.evaluation.sugarcrepe_pp import load_sugarcrepe_pp, prepare_sugarcrepe_pp

        meta = {**meta, "sugarcrepe_pp": prepare_sugarcrepe_pp(b.sugarcrepe_pp.dir, b.sugarcrepe_pp.image_root,
                                                                out / "sugarcrepe_pp")}
        pp_images, pp_texts = benchmark_inputs(load_sugarcrepe_pp(out / "sugarcrepe_pp", decode=False)[0],
                                               ("caption", "caption2", "negative_caption"))
        images, texts = images + pp_images, texts + pp_texts
    write_suite(out, {"suite": "benchmark", "available": True, "images": images, "texts": texts,
                      "sugarcrepe_pp": b.sugarcrepe_pp is not None})
    write_metrics(params.metrics_dir / "benchmark.json", meta)
    return meta


def score_benchmark(params: Params) -> dict:
    """SugarCrepe (and SugarCrepe++) of every model of the grid from its embeddings."""
    from concrete_jungle.evaluation.sugarcrepe import score_sugarcrepe
    from concrete_jungle.evaluation.sugarcrepe_pp import score_sugarcrepe_pp

    def score(folder, meta, cache):
        out = {"sugarcrepe": score_sugarcrepe(folder, cache)}
        if meta.get("sugarcrepe_pp"):
            out["sugarcrepe_pp"] = score_sugarcrepe_pp(folder / "sugarcrepe_pp", cache)
        else:
            out["sugarcrepe_pp"] = {"available": False, "reason": "no SugarCrepe++ in this profile "
                                    "(benchmark.sugarcrepe_pp is null; the scene world has no second positive)"}
        return out

    return score_suite(params, "benchmark", score, results=("sugarcrepe", "sugarcrepe_pp"))


if __name__ == "__main__":
    run_stage(__doc__, {"prepare": build_benchmark, "score": score_benchmark})
