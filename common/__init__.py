"""What the scripts (train.py, sample.py, eval.py) share, none of it the method itself, one story a file. A
training run loads the first four: cli.py (how a script starts, its flags and their checks), checkpoint.py
(the method table, the checkpoint directory and its crash-safe format, standard JSON), runs.py (a training
run's identity and resume, its processes and memory, the environment every result records), metrics.py
(replies to prompts, scores, likelihood). Imported only where they are needed: weights.py (weight files read
safely), init_from.py (--init-from), distributed.py (several processes, FSDP), credentials.py (a .env),
pretrained.py (Qwen3 and the paper's released checkpoints), eval_args.py (eval.py's and sample.py's flags),
throughput.py (tokens/s at batch 1), unconditional.py (samples from BOS), order_plot.py (the decoding order as
text and a picture).
"""
