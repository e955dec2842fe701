"""DVC stages `embed_base`, `embed@<loss>`, `embed_margin@<loss>`, `embed_baseline@<loss>`: encode every prepared
benchmark suite with every model of one family (:mod:`concrete_jungle.grid`), each unique image and text once per
model, in ``evaluate.precision`` (fp32 by default; never the training precision).

Writes ``data/<p>/embeddings/<suite>/<family path>`` (one :class:`~concrete_jungle.evaluation.suite.EmbeddingCache`
per suite and model), read by the ``score_<suite>`` stages.
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.grid import family_members, member_path, model_dir
from concrete_jungle.params import Params


def embed_family(params: Params, family: str) -> dict:
    """Load the members of ``family`` and encode every suite of
    :data:`~concrete_jungle.evaluation.embed.SUITE_ORDER` with them
    (:func:`~concrete_jungle.evaluation.embed.embed_suites`).

    Raises:
        FileNotFoundError: a checkpoint or a prepared suite is missing; ValueError: a checkpoint is not marked
            complete.
    """
    import torch

    from concrete_jungle.evaluation.embed import SUITE_ORDER, embed_suites, set_precision
    from concrete_jungle.models.checkpoints import load_model

    torch.manual_seed(params.seed)
    labels = family_members(params, family)
    bundles = {}
    for label in labels:
        bundle = load_model(model_dir(params, label) / "checkpoint.pt")
        bundle.model.eval()
        set_precision(bundle, params.evaluate.precision)
        bundles[label] = bundle
    root = params.data_dir / "embeddings"
    clear_outputs(*(root / suite / family for suite in SUITE_ORDER))  # a family's files: <suite>/<family>/
    suite_dirs = {s: params.suite_dir(s) for s in SUITE_ORDER}
    out_dirs = {s: {label: root / s / member_path(label) for label in labels} for s in SUITE_ORDER}
    return embed_suites(bundles, suite_dirs, out_dirs, batch_size=params.evaluate.batch_size)


if __name__ == "__main__":
    run_stage(__doc__, embed_family, family={"help": "base, a baseline (clip) or a loss of the training grid"})
