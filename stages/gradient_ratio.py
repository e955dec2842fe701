"""DVC stage `gradient_ratio`: the hard-negative gradient ratio p_{i,i'} / (1 - p_{i,i}) of InfoNCE, Cement loss
and static margins against batch size N, on real ConcreteBatch pairs embedded by the base model (paper Fig. 3,
Fig. 6; :mod:`concrete_jungle.gradient_ratio`). Writes ``metrics/<p>/gradient_ratio.json``.
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.io import read_jsonl, write_metrics
from concrete_jungle.params import Params


def gradient_ratio_stage(params: Params) -> dict:
    """Embed at most ``gradient_ratio.max_pairs`` pairs of ``gradient_ratio.dataset`` (seeded sample) and measure the
    ratio for every N of ``gradient_ratio.batch_sizes`` (an N larger than the pairs is skipped with its reason)."""
    import random

    import torch

    from concrete_jungle.gradient_ratio import gradient_ratio_study, study_losses
    from concrete_jungle.models.checkpoints import load_model
    from concrete_jungle.models.encoding import encode_image_files, encode_images, encode_texts

    gp = params.gradient_ratio
    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    batch = [r for r in read_jsonl(params.data_dir / "concreteplant" / gp.dataset / "concretebatch.jsonl")
             if r.get("negative_image")]
    if len(batch) > gp.max_pairs:
        batch = random.Random(params.seed).sample(batch, gp.max_pairs)
    bs = params.evaluate.batch_size

    def images(paths):
        return encode_image_files(paths, lambda ims: encode_images(bundle, ims, bs), bs, "gradient_ratio: images")

    feats = [images([r["image"] for r in batch]), encode_texts(bundle, [r["caption"] for r in batch], bs),
             images([r["negative_image"] for r in batch]),
             encode_texts(bundle, [r["negative_caption"] for r in batch], bs)]
    c = torch.tensor([r["c_i"] for r in batch], dtype=torch.float32)
    scale = float(bundle.model.logit_scale.exp().clamp(max=100.0))
    result = gradient_ratio_study(*feats, c, scale, gp.batch_sizes, study_losses(params.margin.to_config(),
                                  gp.static_margins), n_batches=gp.n_batches, seed=params.seed)
    result = {"dataset": gp.dataset, "model": "base", **result}
    write_metrics(params.metrics_dir / "gradient_ratio.json", result)
    return {k: v for k, v in result.items() if k != "rows"}


if __name__ == "__main__":
    run_stage(__doc__, gradient_ratio_stage)
