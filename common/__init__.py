"""What the scripts (train.py, sample.py, eval.py) share, none of it the method itself:
checkpoint.py (the checkpoint directory, the METHODS registry), cli.py (flag checks, --threads, --dtype),
replies.py (prompts -> a method's sampler -> replies), metrics.py (accuracy, likelihood, tokens/s),
pretrained.py (Hugging Face and the paper's released checkpoints), runtime.py (DDP/FSDP, signals, NaN stop),
credentials.py (tokens from the environment or a .env)."""
