"""DVC stages `evaluate_base`, `evaluate@*`, `evaluate_margin@*`, `evaluate_baseline@*`: SugarCrepe-format accuracy
of one model per subset, micro and macro (and SugarCrepe++ ITT / TOT when the benchmark has it).

Writes ``metrics/<profile>/evaluate/<label>.json`` and the per-item verdicts ``data/<profile>/verdicts/<label>.json``
(for paired comparisons between models).
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import write_json, write_metrics
from concrete_jungle.params import Params


def evaluate_model(params: Params, label: str) -> dict:
    """Score model ``label`` (``models/<p>/<label>/checkpoint.pt``) on ``data/<p>/benchmark``; every unique image
    and caption is encoded once (SugarCrepe++ reuses SugarCrepe's embeddings).

    Raises:
        FileNotFoundError: the checkpoint is missing; ValueError: it is not marked complete.
    """
    import torch

    from concrete_jungle.evaluation.sugarcrepe import evaluate_sugarcrepe
    from concrete_jungle.models.checkpoints import load_model
    from concrete_jungle.models.encoding import encode_images, encode_texts

    verdict_file = params.data_dir / "verdicts" / f"{label}.json"
    metrics = params.metrics_dir / "evaluate" / f"{label}.json"
    clear_outputs(verdict_file, metrics)
    torch.manual_seed(params.seed)
    bundle = load_model(params.models_dir / label / "checkpoint.pt")
    bs = params.evaluate.batch_size
    enc_img, enc_txt = (lambda ims: encode_images(bundle, ims, bs)), (lambda txt: encode_texts(bundle, txt, bs))
    cache: dict = {}  # SugarCrepe++ reuses SugarCrepe's image / caption embeddings
    result = evaluate_sugarcrepe(enc_img, enc_txt, params.data_dir / "benchmark", batch_size=bs, cache=cache)
    verdicts = {"model": label, "verdicts": result.pop("verdicts", {})}
    pp_dir = params.data_dir / "benchmark" / "sugarcrepe_pp"
    if (pp_dir / "meta.json").is_file():
        from concrete_jungle.evaluation.sugarcrepe_pp import evaluate_sugarcrepe_pp

        result["sugarcrepe_pp"] = evaluate_sugarcrepe_pp(enc_img, enc_txt, pp_dir, batch_size=bs, cache=cache)
        verdicts["sugarcrepe_pp"] = result["sugarcrepe_pp"].pop("verdicts")
    write_json(verdict_file, verdicts)
    result = {"model": label, "profile": params.profile, **result}
    write_metrics(metrics, result)
    return result


if __name__ == "__main__":
    run_stage(__doc__, evaluate_model, label={"help": "base, a baseline (clip) or <dataset>-<loss>"})
