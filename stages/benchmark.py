"""DVC stage `benchmark`: the SugarCrepe-format compositional benchmark (scene world, or real SugarCrepe items with images)."""

from concrete_jungle.experiment import build_benchmark, run_stage

if __name__ == "__main__":
    run_stage(__doc__, build_benchmark)
