"""DVC stages `train`, `train_margin`, `train_baseline`: fine-tune the base model on one ConcreteBatch with one
hard-negative loss (InfoNCE, NegCLIP, Cement, static / inverse margin; paper Sec. 2.3, 3.3), or on the corpus
anchors without hard negatives (`--dataset corpus --loss clip`)."""

from concrete_jungle.experiment import run_stage, train_model
from concrete_jungle.losses import LOSSES

if __name__ == "__main__":
    run_stage(__doc__, train_model, dataset={"choices": ["hc", "lc", "wo", "corpus"]},
              loss={"choices": sorted(LOSSES)})
