# Every experiment is one visible command line. `make help` lists them.
PY ?= python
ITERS ?= 2000
TAUS ?= inf 0.99 0.9 0.8 0.7 0.6
PARETO_TRAIN = --max-iters $(ITERS) --batch-size 32 --eval-limit 50 --save-every 100000 --seed 1
PARETO_EVAL = --limit 500 --max-new-tokens 64

.PHONY: help install install-test demo test pareto bench reproduce-gsm8k finetune-gsm8k example likelihood reproduce-likelihood reproduce-mcqa

help:
	@grep -E '^[a-z0-9-]+:.*## ' Makefile | sed 's/:.*## /\t/'

install:  ## install the runtime dependencies (torch 2.13.0: README says how to get its CPU wheel)
	$(PY) -m pip install -q -r requirements.txt

install-test: install  ## install the test dependencies too
	$(PY) -m pip install -q -r requirements-test.txt
	$(PY) -m pip install -q --no-deps openai-whisper==20250625   # its gpt2.tiktoken: GPT-2 ranks offline

demo: install  ## train Set Diffusion on the shipped task (2-core CPU, ~18 min), then sample and evaluate it
	$(PY) train.py --model setdiffusion --out-dir out/setdiffusion
	$(PY) sample.py --ckpt out/setdiffusion --threshold 0.8 --show-order
	$(PY) eval.py --ckpt out/setdiffusion --threshold 0.8 --limit 200

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

pareto:  ## the GSM8K Pareto figure in miniature: 4 methods x thresholds on the shipped task (<= 60 min CPU)
	mkdir -p results/pareto
	$(PY) train.py --model ar --out-dir out/pareto/ar $(PARETO_TRAIN)
	$(PY) train.py --model mdlm --predict-padding --out-dir out/pareto/mdlm $(PARETO_TRAIN)
	$(PY) train.py --model bd3lm --block-size 4 --out-dir out/pareto/bd3lm $(PARETO_TRAIN)
	$(PY) train.py --model setdiffusion --smax 8 --out-dir out/pareto/setdiffusion $(PARETO_TRAIN)
	$(PY) eval.py --ckpt out/pareto/ar $(PARETO_EVAL) --json results/pareto/ar-inf.json
	$(PY) eval.py --ckpt out/pareto/ar --task throughput --limit 55 --json results/pareto/ar-inf-tput.json
	for m in mdlm bd3lm setdiffusion; do for t in $(TAUS); do \
	  $(PY) eval.py --ckpt out/pareto/$$m --threshold $$t $(PARETO_EVAL) --json results/pareto/$$m-$$t.json && \
	  $(PY) eval.py --ckpt out/pareto/$$m --threshold $$t --task throughput --limit 55 \
	    --json results/pareto/$$m-$$t-tput.json || exit 1; done; done
	$(PY) eval.py --summarize results/pareto/*.json --out results/pareto.md --plot results/pareto.png

PARETO_DIR ?= out/pareto

NEED_PARETO = for m in ar mdlm bd3lm setdiffusion; do [ -f $(PARETO_DIR)/$$m/config.json ] || { \
	  echo "error: make $@ evaluates the make pareto checkpoints, and $(PARETO_DIR)/$$m holds none: run make pareto first (or PARETO_DIR=folder)" >&2; exit 1; }; done

likelihood:  ## per-token NLL and perplexity of the four `make pareto` checkpoints on the shipped task's test split (CPU)
	@$(NEED_PARETO)
	mkdir -p results/likelihood-arith
	for m in ar mdlm bd3lm setdiffusion; do \
	  $(PY) eval.py --ckpt $(PARETO_DIR)/$$m --task likelihood --json results/likelihood-arith/$$m.json || exit 1; done
	$(PY) results.py results/likelihood-arith.md $(foreach m,ar mdlm bd3lm setdiffusion,results/likelihood-arith/$(m).json)

REF ?= e2a4fee
bench:  ## decoding and training throughput of the four methods, this tree beside commit REF in one run (CPU, ~7 min)
	$(PY) bench.py --ref $(REF) --json results/bench.json

.PHONY: bench-gpu
bench-gpu:  ## decode ms/step of AR and Set Diffusion at Qwen3-1.7B's shape, eager / compiled / CUDA graphs, implied tokens/s beside the paper's (CUDA GPU)
	$(PY) bench_gpu.py --json results/bench_gpu.json

# ---- GSM8K with Qwen3-1.7B-Base, as in the paper: a CUDA GPU, and the Hugging Face Hub for the weights,
# the tokenizer and openai/gsm8k (or GSM8K_DIR=folder holding GSM8K's train.jsonl and test.jsonl).
GSM8K_DIR ?=
GSM8K_TAUS ?= inf 0.99 0.95 0.9 0.85 0.8 0.75 0.7 0.65 0.6
GSM8K_CKPTS ?= gsm8k:ar gsm8k:bd3lm-s4 gsm8k:bd3lm-s16 gsm8k:setdlm-smax8 gsm8k:setdlm-smax32
M ?= setdiffusion
GSM8K_DATA = $(if $(GSM8K_DIR),--data-dir $(GSM8K_DIR))
NEED_GPU = $(PY) -c "import sys, torch; torch.cuda.is_available() or sys.exit('error: make $@ needs a CUDA GPU and access to the Hugging Face Hub')"

reproduce-gsm8k:  ## the paper's GSM8K Pareto figure from the released checkpoints: accuracy (FHT commit order) and tokens/s (left to right) per tau, as the official scripts (GPU)
	@$(NEED_GPU)
	mkdir -p results/gsm8k
	for c in $(GSM8K_CKPTS); do n=$${c#gsm8k:}; for t in $(GSM8K_TAUS); do \
	  if [ $$n = ar ] && [ $$t != inf ]; then continue; fi; \
	  $(PY) eval.py --ckpt $$c --task gsm8k --threshold $$t --commit-order fht --official-blocks --batch-size 16 --max-new-tokens 1024 \
	    $(GSM8K_DATA) --json results/gsm8k/$$n-$$t.json && \
	  $(PY) eval.py --ckpt $$c --task throughput --threshold $$t --commit-order l2r --official-blocks --warmup 50 --limit 250 \
	    --max-new-tokens 1024 $(GSM8K_DATA) --json results/gsm8k/$$n-$$t-tput.json || exit 1; done; done
	$(PY) eval.py --summarize results/gsm8k/*.json --paper gsm8k --out results/gsm8k.md --plot results/gsm8k.png

# The paper's recipe (the official GSM8K fine-tuning config): lr 1e-5, 100 warm-up steps, cosine to 0.5 lr, batch 1, 75k steps, bf16
# autocast, EMA 0.9999, clip 1.0; betas (0.9, 0.98) are train.py's own. --weight-decay 1.0: torch's AdamW
# multiplies the decay by the lr, the official (composer) DecoupledAdamW does not, so 1.0 at lr 1e-5 is its 1e-5.
finetune-gsm8k:  ## fine-tune Qwen3-1.7B-Base on GSM8K as the paper did, M=ar|mdlm|bd3lm|setdiffusion (GPU, days)
	@$(NEED_GPU)
	$(PY) train.py --model $(M) --init-from Qwen/Qwen3-1.7B-Base --data gsm8k $(GSM8K_DATA) --seq-len 1024 \
	  --lr 1e-5 --warmup 100 --final-lr 0.5 --weight-decay 1.0 --dtype bfloat16 --ema 0.9999 --grad-clip 1.0 \
	  --batch-size 1 --max-iters 75000 --smax 8 --block-size 4 --max-new-tokens 1024 --eval-limit 200 \
	  --save-every 5000 --out-dir out/gsm8k-$(M)

# ---- Summarization, infilling, unconditional samples (docs/paper.md). CNN/DM and ROCStories need a CUDA GPU and
# the Hub (or CNNDM_DIR = the Hub's parquet files of abisee/cnn_dailymail 3.0.0; ROCSTORIES_DIR = a folder with
# the Story Cloze CSV cloze_test_val__spring2016.csv, which needs a form: https://cs.rochester.edu/nlp/rocstories/).
CNNDM_DIR ?=
CNNDM_CKPTS ?= cnndm:ar cnndm:mdlm cnndm:bd3lm-s4 cnndm:bd3lm-s8 cnndm:bd3lm-s16 cnndm:setdlm-smax8 cnndm:setdlm-smax16 cnndm:setdlm-smax32
CNNDM_DATA = $(if $(CNNDM_DIR),--data-dir $(CNNDM_DIR))
ROCSTORIES_DIR ?= data/rocstories
INFILL_CKPTS ?= owt:ar owt:mdlm owt:bd3lm-s16 owt:setdlm-smax32

.PHONY: train-cnndm reproduce-cnndm reproduce-infill infill

# The official recipe (its CNN/DM config): from scratch, lr 3e-4 constant after 1000 warm-up steps (--final-lr 1),
# global batch 128, bf16, EMA 0.9999, clip 1.0, L = 768, up to 500k steps (the official keeps the best);
# --weight-decay 0.033 = composer's decoupled 1e-5 at lr 3e-4 (see finetune-gsm8k).
train-cnndm:  ## train M=ar|mdlm|bd3lm|setdiffusion on CNN/DailyMail from scratch, the official recipe (GPU, days)
	@$(NEED_GPU)
	$(PY) train.py --model $(M) --data cnndm --preset cnndm $(CNNDM_DATA) --lr 3e-4 --warmup 1000 --final-lr 1.0 \
	  --weight-decay 0.033 --dtype bfloat16 --ema 0.9999 --grad-clip 1.0 --batch-size 32 --grad-accum 4 \
	  --max-iters 500000 --smax 32 --block-size 16 --max-new-tokens 180 --eval-limit 100 --save-every 10000 \
	  --out-dir out/cnndm-$(M)

reproduce-cnndm:  ## ROUGE-1/2/L (1000 test articles) and tokens/s (1000 after 50 warm-up) of the released CNN/DM models (GPU)
	@$(NEED_GPU)
	mkdir -p results/cnndm
	for c in $(CNNDM_CKPTS); do n=$${c#cnndm:}; \
	  $(PY) eval.py --ckpt $$c --task cnndm --official-blocks --limit 1000 --batch-size 16 --max-new-tokens 180 $(CNNDM_DATA) \
	    --json results/cnndm/$$n.json && \
	  $(PY) eval.py --ckpt $$c --task throughput --official-blocks --warmup 50 --limit 1050 --max-new-tokens 180 $(CNNDM_DATA) \
	    --json results/cnndm/$$n-tput.json || exit 1; done
	$(PY) results.py results/cnndm.md results/cnndm/*.json

reproduce-infill:  ## ROCStories: infill 1 and 3 sentences with the OWT models (SD W 32, MDLM one block), ROUGE + tokens/s (GPU)
	@$(NEED_GPU)
	mkdir -p results/infill
	for c in $(INFILL_CKPTS); do n=$${c#owt:}; \
	  w=$$(case $$n in setdlm*) echo --window 32;; mdlm) echo --mdlm-block 1024;; esac); \
	  for s in 1 3; do $(PY) eval.py --ckpt $$c --task rocstories --official-blocks --sentences $$s --data-dir $(ROCSTORIES_DIR) \
	    --warmup 50 --limit 1050 $$w --json results/infill/$$n-$$s.json || exit 1; done; done
	$(PY) results.py results/infill.md results/infill/*.json

infill:  ## fill the masked middle reasoning step of the shipped task with each `make pareto` checkpoint (CPU)
	@$(NEED_PARETO)
	mkdir -p results/infill-arith
	for m in ar mdlm bd3lm setdiffusion; do \
	  $(PY) eval.py --ckpt $(PARETO_DIR)/$$m --task infill --limit 500 --warmup 5 \
	    --json results/infill-arith/$$m.json || exit 1; done
	$(PY) results.py results/infill-arith.md results/infill-arith/*.json
# ---- OWT and LM1B (DiT) from the released checkpoints: perplexity and zero-shot multiple choice, as the official
# eval scripts run them (OWT batch 16). A CUDA GPU and the Hub (weights; Skylion007/openwebtext,
# billion-word-benchmark/lm1b, Rowan/hellaswag, ybisk/piqa, allenai/social_i_qa), or local copies: OWT_DIR (OWT's
# train split, parquet/jsonl), LM1B_DIR (its test split), MCQA_DIR (hellaswag/, piqa/, siqa/ validation files).
OWT_CKPTS ?= owt:ar owt:mdlm owt:bd3lm-s4 owt:bd3lm-s8 owt:bd3lm-s16 owt:setdlm-smax8 owt:setdlm-smax16 owt:setdlm-smax32
LM1B_CKPTS ?= $(subst owt:,lm1b:,$(OWT_CKPTS))
OWT_DIR ?=
LM1B_DIR ?=
MCQA_DIR ?=
LIMIT ?= 0

reproduce-likelihood:  ## OWT and LM1B perplexity of the released checkpoints -> results/likelihood.md (GPU + Hub)
	@$(NEED_GPU)
	mkdir -p results/likelihood
	for c in $(OWT_CKPTS); do $(PY) eval.py --ckpt $$c --task likelihood --data owt --batch-size 16 --limit $(LIMIT) \
	  $(if $(OWT_DIR),--data-dir $(OWT_DIR)) --json results/likelihood/owt-$${c#owt:}.json || exit 1; done
	for c in $(LM1B_CKPTS); do $(PY) eval.py --ckpt $$c --task likelihood --data lm1b --batch-size 64 --limit $(LIMIT) \
	  $(if $(LM1B_DIR),--data-dir $(LM1B_DIR)) --json results/likelihood/lm1b-$${c#lm1b:}.json || exit 1; done
	$(PY) results.py results/likelihood.md results/likelihood/*.json

reproduce-mcqa:  ## zero-shot HellaSwag, PIQA, SIQA accuracy of the OWT checkpoints -> results/mcqa.md (GPU + Hub)
	@$(NEED_GPU)
	mkdir -p results/mcqa
	for c in $(OWT_CKPTS); do for t in hellaswag piqa siqa; do \
	  $(PY) eval.py --ckpt $$c --task $$t --batch-size 32 --limit $(LIMIT) $(if $(MCQA_DIR),--data-dir $(MCQA_DIR)/$$t) \
	    --json results/mcqa/$${c#owt:}-$$t.json || exit 1; done; done
	$(PY) results.py results/mcqa.md results/mcqa/*.json
