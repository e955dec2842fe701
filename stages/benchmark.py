"""DVC stage `benchmark`: the SugarCrepe-format compositional benchmark (scene world, or the real SugarCrepe items
whose image is present) and SugarCrepe++ when ``benchmark.sugarcrepe_pp`` names it.

Writes ``data/<profile>/benchmark`` (+ ``meta.json``, ``sugarcrepe_pp/``) and ``metrics/<profile>/benchmark.json``.
"""

from concrete_jungle.cli import fresh_dir, run_stage
from concrete_jungle.io import read_json, read_jsonl, write_json, write_metrics
from concrete_jungle.params import Params


def build_benchmark(params: Params) -> dict:
    """The scene world generates its seven subsets on scenes whose signatures never occur in the corpus; real
    SugarCrepe and SugarCrepe++ are filtered to the items whose image is present.

    Raises:
        ValueError: a benchmark item whose filename leaves its image root, or a malformed item (named).
    """
    out = fresh_dir(params.data_dir / "benchmark")
    b = params.benchmark
    if b.source == "scene_world":
        from concrete_jungle.corpus.scene_world.benchmark import generate_benchmark
        from concrete_jungle.corpus.scene_world.graph import Scene, scene_signature

        corpus = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
        exclude = {scene_signature(Scene.from_dict(r["scene"])) for r in corpus if "scene" in r}
        counts = generate_benchmark(params.world, b.n_per_subset, out, seed=params.seed + 1_000_003,
                                    exclude=exclude)
        skipped = read_json(out / "scenes.json").get("skipped", {}) if (out / "scenes.json").exists() else {}
        meta = {"image_root": str(out / "images"), "source": "scene_world", "n_items": counts, "skipped": skipped}
        write_json(out / "meta.json", meta)
    else:
        from concrete_jungle.evaluation.sugarcrepe import prepare_benchmark

        meta = prepare_benchmark(b.sugarcrepe.dir, b.sugarcrepe.image_root, out, source_name="sugarcrepe")
    if b.sugarcrepe_pp is not None:
        from concrete_jungle.evaluation.sugarcrepe_pp import prepare_sugarcrepe_pp

        meta = {**meta, "sugarcrepe_pp": prepare_sugarcrepe_pp(b.sugarcrepe_pp.dir, b.sugarcrepe_pp.image_root,
                                                                out / "sugarcrepe_pp")}
    write_metrics(params.metrics_dir / "benchmark.json", meta)
    return meta


if __name__ == "__main__":
    run_stage(__doc__, build_benchmark)
