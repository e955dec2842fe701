"""DVC stage `evaluate`: SugarCrepe-format accuracy of one model (per subset, micro and macro)."""

from concrete_jungle.experiment import evaluate_model, run_stage

if __name__ == "__main__":
    run_stage(__doc__, evaluate_model, label={"help": "base or <dataset>-<loss>"})
