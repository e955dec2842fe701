"""DVC stage `gradient_ratio`: hard-negative gradient ratio vs batch size and margin (paper Fig. 3, Fig. 6)."""

from concrete_jungle.experiment import gradient_ratio_stage, run_stage

if __name__ == "__main__":
    run_stage(__doc__, gradient_ratio_stage)
