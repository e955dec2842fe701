"""DVC stage `concreteplant`: ConcretePlant hard negatives for one ConcreteBatch dataset (hc, lc or wo; paper Sec. 2.2)."""

from concrete_jungle.experiment import run_concreteplant_stage, run_stage

if __name__ == "__main__":
    run_stage(__doc__, run_concreteplant_stage, dataset={"choices": ["hc", "lc", "wo"]})
