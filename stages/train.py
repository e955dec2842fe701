"""DVC stages `train@<dataset>-<loss>`, `train_margin@<dataset>-<loss>` and `train_baseline@<loss>`: fine-tune the
base model on one ConcreteBatch with one hard-negative loss (InfoNCE, NegCLIP, Cement, static / inverse margin;
paper Sec. 2.3, 3.3), or on the corpus anchors without hard negatives (``--dataset corpus --loss clip``).

Writes ``models/<p>/<label>/checkpoint.pt`` and dvclive logs in ``metrics/<p>/train/<label>``
(:func:`~concrete_jungle.grid.model_label`).
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.grid import model_label
from concrete_jungle.io import read_jsonl
from concrete_jungle.losses import HARD_NEGATIVE_LOSSES, LOSSES, build_loss
from concrete_jungle.params import Params


def train_model(params: Params, dataset: str, loss: str) -> dict:
    """Fine-tune ``models/<p>/base`` with ``loss`` (2N x 2N logits with hard negatives, N x N for ``clip``).
    A killed run resumes from ``models/<p>/resume/<label>``; a concurrent second run of the same label fails.

    Raises:
        ValueError: for a baseline loss on a ConcreteBatch or a hard-negative loss on the corpus; a base checkpoint
            that is not marked complete; a ConcreteBatch record whose c_i is not a finite value in [1, 5].
    """
    from concrete_jungle.models.checkpoints import load_model, save_checkpoint
    from concrete_jungle.training import AnchorDataset, ConcreteBatchDataset, train_contrastive

    tp = params.train
    label = model_label(dataset, loss)
    hard = loss in HARD_NEGATIVE_LOSSES
    if hard == (dataset == "corpus"):
        raise ValueError(f"loss {loss!r} {'needs' if hard else 'takes no'} hard negatives: dataset {dataset!r} "
                         f"{'has none' if hard else 'is a ConcreteBatch'}")
    bundle = load_model(params.models_dir / "base" / "checkpoint.pt")
    preprocess = bundle.preprocess_train if tp.augment else bundle.preprocess_val
    if hard:
        batch = read_jsonl(params.data_dir / "concreteplant" / dataset / "concretebatch.jsonl")
        # losses without hard-negative images (NegCLIP) never decode them, so text-only ConcreteBatches work
        ds = ConcreteBatchDataset(batch, preprocess, bundle.tokenizer, cache=not tp.augment,
                                  negative_images=LOSSES[loss].needs_hard_negative_images)
    else:
        records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
        ds = AnchorDataset(records, preprocess, bundle.tokenizer, caption="anchor", seed=params.seed,
                           cache=not tp.augment)
    live_dir = params.metrics_dir / "train" / label
    return train_contrastive(bundle, ds, build_loss(loss, params.margin.to_config()), tp, seed=params.seed,
                             live_dir=live_dir, checkpoint_path=params.models_dir / label / "checkpoint.pt",
                             params_dump=params.model_dump(), save_checkpoint=save_checkpoint, hard_negatives=hard,
                             state_path=params.resume_state(label), keep_state=False)


if __name__ == "__main__":
    run_stage(__doc__, train_model, dataset={"choices": ["hc", "lc", "wo", "corpus"]},
              loss={"choices": sorted(LOSSES)})
