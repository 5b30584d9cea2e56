# Every experiment is one visible command line. `make help` lists them.
PY ?= python
ITERS ?= 1500
TAUS ?= inf 0.99 0.9 0.8 0.7 0.6
PARETO_TRAIN = --max-iters $(ITERS) --eval-limit 50 --save-every 100000 --seed 1
PARETO_EVAL = --limit 500 --max-new-tokens 64

.PHONY: help install install-test demo test pareto bench

help:
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/'

install:  ## install the runtime dependencies (CPU torch)
	$(PY) -m pip install -q -r requirements.txt

install-test: install  ## install the test dependencies too
	$(PY) -m pip install -q -r requirements-test.txt

demo: install  ## train Set Diffusion on the shipped task (CPU, minutes), then sample and evaluate it
	$(PY) train.py --model setdiffusion --out-dir out/setdiffusion
	$(PY) sample.py --ckpt out/setdiffusion --threshold 0.8 --show-order
	$(PY) eval.py --ckpt out/setdiffusion --threshold 0.8 --limit 200

test: install-test  ## run the tests (the same command CI runs)
	$(PY) -m pytest -q test_all.py

pareto:  ## the GSM8K Pareto figure in miniature: 4 methods x thresholds on the shipped task (<= 60 min CPU)
	mkdir -p results/pareto
	$(PY) train.py --model ar --out-dir out/pareto/ar $(PARETO_TRAIN)
	$(PY) train.py --model mdlm --out-dir out/pareto/mdlm $(PARETO_TRAIN)
	$(PY) train.py --model bd3lm --block-size 4 --out-dir out/pareto/bd3lm $(PARETO_TRAIN)
	$(PY) train.py --model setdiffusion --smax 8 --out-dir out/pareto/setdiffusion $(PARETO_TRAIN)
	$(PY) eval.py --ckpt out/pareto/ar $(PARETO_EVAL) --json results/pareto/ar-inf.json
	$(PY) eval.py --ckpt out/pareto/ar --task throughput --limit 55 --json results/pareto/ar-inf-tput.json
	for m in mdlm bd3lm setdiffusion; do for t in $(TAUS); do \
	  $(PY) eval.py --ckpt out/pareto/$$m --threshold $$t $(PARETO_EVAL) --json results/pareto/$$m-$$t.json && \
	  $(PY) eval.py --ckpt out/pareto/$$m --threshold $$t --task throughput --limit 55 \
	    --json results/pareto/$$m-$$t-tput.json || exit 1; done; done
	$(PY) eval.py --summarize results/pareto/*.json --out results/pareto.md --plot results/pareto.png

bench:  ## decoding throughput of the pareto checkpoints at batch 1 and batched (tau = 0.9)
	for m in ar bd3lm setdiffusion; do \
	  $(PY) eval.py --ckpt out/pareto/$$m --task throughput --threshold 0.9 --limit 55 || exit 1; done
