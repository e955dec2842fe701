"""DVC stage `report`: render the SugarCrepe table and the gradient-ratio figure from tracked metrics."""

from concrete_jungle.experiment import render_reports, run_stage

if __name__ == "__main__":
    run_stage(__doc__, render_reports)
