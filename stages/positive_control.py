"""DVC stage `positive_control`: does the control arm of each ConcreteBatch (its InfoNCE fine-tune) beat the baseline
(``clip``) on the held-out pairs of its own ConcreteBatch? (:mod:`concrete_jungle.evaluation.positive_control`).
Writes ``metrics/<p>/positive_control.json``: per model (control arm or treatment), I2T and T2I by keyword type, the
paired gain in points with its bootstrap CI, McNemar p, required gain, minimal detectable effect and ``passed``; the
study's verdict. Where the profile has text-side pairs (``text_side.captions``), the same rule on them (TOT) is the
file's ``text_side`` block. The report states it first and marks the comparisons that cannot be read.
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.params import Params


def positive_control_stage(params: Params) -> dict:
    """Read ``data/<p>/suites/heldout/items.json`` and ``data/<p>/verdicts/heldout/<label>.json`` of every model of the
    grid (and ``text_items.json`` with ``data/<p>/verdicts/heldout_text/`` where the suite has text-side pairs),
    judge the control with ``evaluate.positive_control`` and write the metrics file.

    Raises:
        FileNotFoundError: the prepared held-out suite is missing (named).
    """
    from concrete_jungle.evaluation.heldout import TEXT_ITEMS
    from concrete_jungle.evaluation.positive_control import positive_control, read_heldout_verdicts
    from concrete_jungle.grid import model_labels
    from concrete_jungle.io import read_json, write_metrics

    pc = params.evaluate.positive_control
    baselines = list(params.train.baselines)
    models = [lab for lab in model_labels(params) if lab != "base" and lab not in baselines]
    items_path = params.suite_dir("heldout") / "items.json"
    if not items_path.is_file():
        raise FileNotFoundError(f"held-out suite not found: {items_path} (run prepare_heldout)")
    kw = dict(control_losses=pc.control_losses, min_gain=pc.min_gain, headroom_share=pc.headroom_share,
              alpha=pc.alpha, power=pc.power, n_resamples=pc.bootstrap_resamples,
              confidence_level=pc.confidence_level, seed=params.seed)

    def judge(suite: str, items: dict) -> dict:
        folder = params.data_dir / "verdicts" / suite
        verdicts = {lab: read_heldout_verdicts(folder, lab) for lab in [*models, *baselines]}
        return positive_control(items, verdicts, models, baselines, **kw)

    result = judge("heldout", read_json(items_path))
    text_path = params.suite_dir("heldout") / TEXT_ITEMS
    text_items = read_json(text_path) if text_path.is_file() else {}
    if any(text_items.values()):
        result["text_side"] = judge("heldout_text", text_items)
    write_metrics(params.metrics_dir / "positive_control.json", result)
    short = {"status": result["status"], "failed": result["failed"], "underpowered": result["underpowered"],
             "reason": result["reason"]}
    if "text_side" in result:
        short["text_side"] = {k: result["text_side"][k] for k in ("status", "failed", "underpowered", "reason")}
    return short


if __name__ == "__main__":
    run_stage(__doc__, positive_control_stage)
