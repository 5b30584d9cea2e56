"""The paper's experiments beyond the shipped task, as eval.py and sample.py run them: generation.py (CNN/DM,
ROCStories and arith infilling, unconditional samples), zeroshot.py (HellaSwag, PIQA, SIQA), results.py
(tables and the Pareto plot of eval.py --json files: python -m paper.results), reproduce.mk (their make
targets)."""
