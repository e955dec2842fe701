"""DVC stage `dataset_stats`: Table 1 statistics of one ConcreteBatch (hc, lc or wo; paper Sec. 3.1, Tab. 1)."""

from concrete_jungle.experiment import dataset_stats_stage, run_stage

if __name__ == "__main__":
    run_stage(__doc__, dataset_stats_stage, dataset={"choices": ["hc", "lc", "wo"]})
