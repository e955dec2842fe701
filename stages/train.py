"""DVC stage `train`: fine-tune the base model on one ConcreteBatch with one loss (InfoNCE, Cement; paper Sec. 2.3)."""

from concrete_jungle.experiment import train_model, run_stage

if __name__ == "__main__":
    run_stage(__doc__, train_model, dataset={"choices": ["hc", "lc", "wo"]}, loss={"help": "infonce | cement | clip"})
