"""What the scripts (train.py, sample.py, eval.py) share, none of it the method itself:
methods.py (the registry of the four method files), checkpoint.py (reading a checkpoint), saving.py (writing
one so that a kill loses nothing), schema.py (config.json checked), runs.py (which run a checkpoint is),
cli.py (flag checks, --threads, --dtype), replies.py (prompts -> a method's sampler -> replies), metrics.py
(accuracy, likelihood, tokens/s), pretrained.py (Hugging Face and the paper's released checkpoints),
runtime.py (the device, DDP/FSDP, signals, NaN stop), credentials.py (tokens from the environment or a .env),
environment.py (what produced a result: commit, versions, device, lock), standard_json.py (JSON without
Infinity/NaN: tau = inf as "inf").
"""
