"""DVC stage `base_model`: the starting model, trained contrastively on the corpus anchors alone."""

from concrete_jungle.experiment import train_base_model, run_stage

if __name__ == "__main__":
    run_stage(__doc__, train_base_model)
