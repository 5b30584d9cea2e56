# The paper's experiments on a CUDA GPU with the Hugging Face Hub (docs/paper.md), included by the Makefile:
# `make reproduce-gsm8k` etc. run from the repository root, and `make help` lists them.
# EVAL_EXTRA and TRAIN_EXTRA are appended to every eval.py and train.py line (argparse keeps a flag's last value),
# TIMED_EXTRA also to the timed eval.py lines (throughput, infilling: the ones reading --warmup, which the others
# refuse). Empty here; `make rehearse` (paper/rehearse.py) runs every target on a CPU with them shrinking each run,
# and with NEED_GPU=: past the GPU check. Rehearse there before renting a GPU.
EVAL_EXTRA ?=
TIMED_EXTRA ?=
TRAIN_EXTRA ?=
# A rerun replaces no finished result: where an eval.py line's files (its --json, and its --replies where it keeps them)
# exist, an earlier run finished it. Without RESUME a target whose folders hold such a file stops before any run, in one
# line naming it (FRESH; KEPT too, should one appear meanwhile); RESUME=1 keeps the finished lines' files and runs only
# the others (an interrupted sweep goes on where it stopped: give it the same variables). To measure a result again,
# move its files (or its folder) away first.
RESUME ?=
RERUN = holds a result an earlier run finished, which a rerun would replace: move it (or its folder) away to measure it again, or pass RESUME=1 to keep the finished results and run only the rest
FRESH = @for f in $(foreach d,$(1),$(d)/*.json); do [ -n "$(RESUME)" ] || [ ! -e $$f ] || { echo "error: $$f $(RERUN)" >&2; exit 1; }; done
KEPT = { any=; all=1; for f in $(1); do if [ -e $$f ]; then any=1; else all=; fi; done; \
  if [ -n "$(RESUME)" ]; then [ -n "$$all" ] && echo "kept $(firstword $(1)): finished by an earlier run (RESUME=1)"; \
  elif [ -n "$$any" ]; then echo "error: $(firstword $(1)) $(RERUN)" >&2; exit 1; \
  else false; fi; }
.PHONY: smoke-gsm8k reproduce-gsm8k finetune-gsm8k train-cnndm reproduce-cnndm reproduce-infill reproduce-likelihood \
  reproduce-mcqa reproduce-unconditional reproduce-gsm8k-likelihood

# ---- GSM8K with Qwen3-1.7B-Base, as in the paper: a CUDA GPU, and the Hugging Face Hub for the weights,
# the tokenizer and openai/gsm8k (or GSM8K_DIR=folder holding GSM8K's train.jsonl and test.jsonl). Each accuracy run
# scores every reply four ways (official_accuracy, the official printed rule, is the one results/gsm8k.md puts beside the
# paper's) and keeps them in NAME-TAU.jsonl (eval.py --replies). Last, lm-eval's own gsm8k task (eval.py --task lm-eval,
# 0-shot, tau = inf; always openai/gsm8k from the Hub): its strict-match / flexible-extract and the official printed
# accuracy per checkpoint in results/gsm8k-harness/, beside ours in results/gsm8k/NAME-inf.json.
GSM8K_DIR ?=
GSM8K_TAUS ?= inf 0.99 0.95 0.9 0.85 0.8 0.75 0.7 0.65 0.6
GSM8K_CKPTS ?= gsm8k:ar gsm8k:bd3lm-s4 gsm8k:bd3lm-s16 gsm8k:setdlm-smax8 gsm8k:setdlm-smax32
M ?= setdiffusion
GSM8K_DATA = $(if $(GSM8K_DIR),--data-dir $(GSM8K_DIR))
# Each method's own setting (train.py refuses a setting its --model does not have): Set Diffusion's smax ($(1)),
# BD3-LM's block size S ($(2)); AR and MDLM take neither.
METHOD_SETTINGS = $(if $(filter setdiffusion,$(M)),--smax $(1))$(if $(filter bd3lm,$(M)),--block-size $(2))
NEED_GPU = $(PY) -c "import sys, torch; torch.cuda.is_available() or sys.exit('error: make $@ needs a CUDA GPU and access to the Hugging Face Hub')"

# A smoke run before the sweep (docs/paper.md, the runbook): per checkpoint, SMOKE_N problems of the accuracy run at its
# batch 16 (tau 0.9; AR inf) and SMOKE_N timed after 2 warm-up, one round; each line prints the peak GPU memory and
# tokens/s, results/gsm8k-smoke.md tables them. Minutes per checkpoint.
SMOKE_N ?= 16
smoke-gsm8k:  ## before make reproduce-gsm8k: a few problems per checkpoint at the sweep's settings, peak GPU memory and tokens/s each (GPU, minutes)
	@$(NEED_GPU)
	mkdir -p results/gsm8k-smoke
	$(call FRESH,results/gsm8k-smoke)
	for c in $(GSM8K_CKPTS); do n=$$(basename $${c#gsm8k:}); t=$$( [ $$n = ar ] && echo inf || echo 0.9 ); \
	  { $(call KEPT,results/gsm8k-smoke/$$n.json results/gsm8k-smoke/$$n.jsonl) || \
	  $(PY) eval.py --ckpt $$c --task gsm8k --threshold $$t --commit-order fht --official --batch-size 16 --limit $(SMOKE_N) \
	    --max-new-tokens 1024 $(GSM8K_DATA) --json results/gsm8k-smoke/$$n.json --replies results/gsm8k-smoke/$$n.jsonl \
	    $(EVAL_EXTRA); } && { $(call KEPT,results/gsm8k-smoke/$$n-tput.json) || \
	  $(PY) eval.py --ckpt $$c --task throughput --threshold $$t --commit-order l2r --official --warmup 2 \
	    --limit $$(( $(SMOKE_N) + 2 )) --rounds 1 --max-new-tokens 1024 $(GSM8K_DATA) --json results/gsm8k-smoke/$$n-tput.json \
	    $(EVAL_EXTRA) $(TIMED_EXTRA); } || exit 1; done
	$(PY) -m paper.results results/gsm8k-smoke.md results/gsm8k-smoke/*.json

reproduce-gsm8k:  ## the paper's GSM8K Pareto figure from the released checkpoints: accuracy (FHT commit order) and tokens/s (left to right) per tau, as the official scripts (GPU)
	@$(NEED_GPU)
	mkdir -p results/gsm8k
	$(call FRESH,results/gsm8k results/gsm8k-harness)
	for c in $(GSM8K_CKPTS); do n=$$(basename $${c#gsm8k:}); for t in $(GSM8K_TAUS); do \
	  if [ $$n = ar ] && [ $$t != inf ]; then continue; fi; \
	  { $(call KEPT,results/gsm8k/$$n-$$t.json results/gsm8k/$$n-$$t.jsonl) || \
	  $(PY) eval.py --ckpt $$c --task gsm8k --threshold $$t --commit-order fht --official --batch-size 16 --max-new-tokens 1024 \
	    $(GSM8K_DATA) --json results/gsm8k/$$n-$$t.json --replies results/gsm8k/$$n-$$t.jsonl $(EVAL_EXTRA); } && \
	  { $(call KEPT,results/gsm8k/$$n-$$t-tput.json) || \
	  $(PY) eval.py --ckpt $$c --task throughput --threshold $$t --commit-order l2r --official --warmup 50 --limit 250 \
	    --max-new-tokens 1024 $(GSM8K_DATA) --json results/gsm8k/$$n-$$t-tput.json $(EVAL_EXTRA) $(TIMED_EXTRA); } || exit 1; done; done
	$(PY) -m paper.results results/gsm8k.md results/gsm8k/*.json --pareto --paper gsm8k --plot results/gsm8k.png
	mkdir -p results/gsm8k-harness
	for c in $(GSM8K_CKPTS); do n=$$(basename $${c#gsm8k:}); \
	  $(call KEPT,results/gsm8k-harness/$$n.json results/gsm8k-harness/$$n.jsonl) || \
	  $(PY) eval.py --ckpt $$c --task lm-eval --tasks gsm8k --num-fewshot 0 --threshold inf \
	  --commit-order fht --official --batch-size 16 --max-new-tokens 1024 --json results/gsm8k-harness/$$n.json \
	  --replies results/gsm8k-harness/$$n.jsonl $(EVAL_EXTRA) || exit 1; done

# The paper's GSM8K likelihood (the official run_likelihood_eval_gsm8k.sh) is measured on the official distillation eval
# split, Qwen3-32B-AWQ replies the official code reads from outputs/distillation/Qwen3-32B-AWQ/gsm8k_eval; neither those
# replies nor the script that wrote them were released, so there is nothing to measure it on.
reproduce-gsm8k-likelihood:  ## the paper's GSM8K likelihood: refused in one line, its eval data was never released
	@echo "error: the paper's GSM8K likelihood is measured on the official distillation eval split (Qwen3-32B-AWQ replies, outputs/distillation/Qwen3-32B-AWQ/gsm8k_eval in the official code), which was never released, nor the script that made it; eval.py --ckpt gsm8k:NAME --task likelihood measures GSM8K's own test solutions instead, a different number" >&2; exit 1

# The recipe the released checkpoints' run names state (lr1e-5_bsz1_warm100ba_alphaf0.5_max-dur75000ba_amp_bf16), and the
# official AR and BD3-LM GSM8K scripts: lr 1e-5, 100 warm-up steps, cosine to 0.5 lr, batch 1, 75k steps, bf16 autocast,
# EMA 0.9999, clip 1.0; betas (0.9, 0.98) are train.py's own. The official Set Diffusion script at HEAD says lr 1e-6 and
# batch 16 instead (docs/paper.md). --weight-decay 1.0: torch's AdamW multiplies the decay by the lr, the official
# (composer) DecoupledAdamW does not, so 1.0 at lr 1e-5 is its 1e-5.
finetune-gsm8k:  ## fine-tune Qwen3-1.7B-Base on GSM8K as the paper did, M=ar|mdlm|bd3lm|setdiffusion (GPU, days)
	@$(NEED_GPU)
	$(PY) train.py --model $(M) --init-from Qwen/Qwen3-1.7B-Base --data gsm8k $(GSM8K_DATA) --seq-len 1024 \
	  --lr 1e-5 --warmup 100 --final-lr 0.5 --weight-decay 1.0 --dtype bfloat16 --ema 0.9999 --grad-clip 1.0 \
	  --batch-size 1 --max-iters 75000 $(call METHOD_SETTINGS,8,4) --max-new-tokens 1024 --eval-limit 200 \
	  --save-every 5000 --out-dir out/gsm8k-$(M) $(TRAIN_EXTRA)

# ---- Summarization, infilling, unconditional samples (docs/paper.md). CNN/DM and ROCStories need a CUDA GPU and
# the Hub (or CNNDM_DIR = the Hub's parquet files of abisee/cnn_dailymail 3.0.0; ROCSTORIES_DIR = a folder with
# the Story Cloze CSV cloze_test_val__spring2016.csv, which needs a form: https://cs.rochester.edu/nlp/rocstories/).
CNNDM_DIR ?=
CNNDM_CKPTS ?= cnndm:ar cnndm:mdlm cnndm:bd3lm-s4 cnndm:bd3lm-s8 cnndm:bd3lm-s16 cnndm:setdlm-smax8 cnndm:setdlm-smax16 cnndm:setdlm-smax32
CNNDM_DATA = $(if $(CNNDM_DIR),--data-dir $(CNNDM_DIR))
ROCSTORIES_DIR ?= data/rocstories
INFILL_CKPTS ?= owt:ar owt:mdlm owt:bd3lm-s16 owt:setdlm-smax32


# The official recipe (its CNN/DM config): from scratch, lr 3e-4 constant after 1000 warm-up steps (--final-lr 1),
# global batch 128, bf16, EMA 0.9999, clip 1.0, L = 768, up to 500k steps (the official keeps the best);
# --weight-decay 0.033 = composer's decoupled 1e-5 at lr 3e-4 (see finetune-gsm8k).
train-cnndm:  ## train M=ar|mdlm|bd3lm|setdiffusion on CNN/DailyMail from scratch, the official recipe (GPU, days)
	@$(NEED_GPU)
	$(PY) train.py --model $(M) --data cnndm --preset cnndm $(CNNDM_DATA) --lr 3e-4 --warmup 1000 --final-lr 1.0 \
	  --weight-decay 0.033 --dtype bfloat16 --ema 0.9999 --grad-clip 1.0 --batch-size 32 --grad-accum 4 \
	  --max-iters 500000 $(call METHOD_SETTINGS,32,16) --max-new-tokens 180 --eval-limit 100 --save-every 10000 \
	  --out-dir out/cnndm-$(M) $(TRAIN_EXTRA)

# ROUGE over the whole test split, as the official (MAX_EVAL_SAMPLES=null: 11,490 articles; CNNDM_LIMIT=N: the first N, a
# quick look), replies kept in NAME.jsonl; tokens/s as the official's timed run (1000 after 50 warm-up).
CNNDM_LIMIT ?= 0
reproduce-cnndm:  ## ROUGE-1/2/L (all 11,490 test articles) and tokens/s (1000 after 50 warm-up) of the released CNN/DM models (GPU)
	@$(NEED_GPU)
	mkdir -p results/cnndm
	$(call FRESH,results/cnndm)
	for c in $(CNNDM_CKPTS); do n=$${c#cnndm:}; \
	  { $(call KEPT,results/cnndm/$$n.json results/cnndm/$$n.jsonl) || \
	  $(PY) eval.py --ckpt $$c --task cnndm --official --limit $(CNNDM_LIMIT) --batch-size 16 --max-new-tokens 180 $(CNNDM_DATA) \
	    --json results/cnndm/$$n.json --replies results/cnndm/$$n.jsonl $(EVAL_EXTRA); } && \
	  { $(call KEPT,results/cnndm/$$n-tput.json) || \
	  $(PY) eval.py --ckpt $$c --task throughput --official --warmup 50 --limit 1050 --max-new-tokens 180 $(CNNDM_DATA) \
	    --json results/cnndm/$$n-tput.json $(EVAL_EXTRA) $(TIMED_EXTRA); } || exit 1; done
	$(PY) -m paper.results results/cnndm.md results/cnndm/*.json

# ROUGE from an untimed run over all 1,871 stories (the official's ROUGE: its timed run exits before it; INFILL_LIMIT=N: the
# first N, a quick look), replies kept; tokens/s from the official's timed run (--throughput-run: 1000 after 50 warm-up,
# scored by nothing). Each under both official recipes (INFILL_RECIPES; data/rocstories.py): h100, its H100 wrapper
# (penalty 1.2 counting the right context, Set Diffusion caching it first), and suite, its suite runner's rows (penalty
# 1.1 for one sentence, 1.5 for three, the right context neither counted nor cached); the paper does not say which.
INFILL_LIMIT ?= 0
INFILL_RECIPES ?= h100 suite
INFILL_SENTENCES ?= 1 3
reproduce-infill:  ## ROCStories: infill 1 and 3 sentences with the OWT models under both official recipes, ROUGE (all stories) + tokens/s (GPU)
	@$(NEED_GPU)
	mkdir -p results/infill
	$(call FRESH,results/infill)
	for c in $(INFILL_CKPTS); do n=$${c#owt:}; \
	  w=$$(case $$n in setdlm*) echo --window 32;; mdlm) echo --mdlm-block 1024;; esac); \
	  for r in $(INFILL_RECIPES); do for s in $(INFILL_SENTENCES); do \
	  { $(call KEPT,results/infill/$$n-$$s-$$r.json results/infill/$$n-$$s-$$r.jsonl) || \
	  $(PY) eval.py --ckpt $$c --task rocstories --official --sentences $$s --recipe $$r --data-dir $(ROCSTORIES_DIR) \
	    --warmup 0 --limit $(INFILL_LIMIT) $$w --json results/infill/$$n-$$s-$$r.json --replies results/infill/$$n-$$s-$$r.jsonl \
	    $(EVAL_EXTRA); } && { $(call KEPT,results/infill/$$n-$$s-$$r-tput.json) || \
	  $(PY) eval.py --ckpt $$c --task rocstories --official --sentences $$s --recipe $$r --data-dir $(ROCSTORIES_DIR) \
	    --throughput-run --warmup 50 --limit 1050 $$w --json results/infill/$$n-$$s-$$r-tput.json $(EVAL_EXTRA) $(TIMED_EXTRA); \
	    } || exit 1; done; done; done
	$(PY) -m paper.results results/infill.md results/infill/*.json --infill

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
# The official eval's precision: its composer trainer's amp_bf16 (bfloat16 autocast, the log-softmax in float32);
# LIKELIHOOD_PRECISION=fp32 runs all in float32. Set Diffusion's OWT likelihood under both official recipes
# (LIKELIHOOD_RECIPES; data/owt.py RECIPES), as the paper does not say which gave its numbers: script, the likelihood
# script's smax = 2d (the paper's schedule; owt-NAME.json), and suite, its suite runner's rows, max_block_size = d
# (owt-NAME-suite.json); results/likelihood.md labels each row with its recipe. The other methods, and LM1B, are the
# same under both: run once (script).
LIKELIHOOD_PRECISION ?= amp_bf16
LIKELIHOOD_RECIPES ?= script suite

reproduce-likelihood:  ## OWT and LM1B perplexity of the released checkpoints (OWT Set Diffusion under both official recipes) -> results/likelihood.md (GPU + Hub)
	@$(NEED_GPU)
	mkdir -p results/likelihood
	$(call FRESH,results/likelihood)
	for c in $(OWT_CKPTS); do n=$${c#owt:}; rs=$$(case $$n in *setdlm*|*setdiffusion*) echo $(LIKELIHOOD_RECIPES);; *) echo script;; esac); \
	  for r in $$rs; do j=results/likelihood/owt-$$n$$([ $$r = script ] || echo -$$r).json; $(call KEPT,$$j) || \
	    $(PY) eval.py --ckpt $$c --task likelihood --data owt --recipe $$r --batch-size 16 --limit $(LIMIT) \
	    --precision $(LIKELIHOOD_PRECISION) $(if $(OWT_DIR),--data-dir $(OWT_DIR)) --json $$j $(EVAL_EXTRA) || exit 1; done; done
	for c in $(LM1B_CKPTS); do $(call KEPT,results/likelihood/lm1b-$${c#lm1b:}.json) || \
	  $(PY) eval.py --ckpt $$c --task likelihood --data lm1b --batch-size 64 --limit $(LIMIT) \
	  --precision $(LIKELIHOOD_PRECISION) $(if $(LM1B_DIR),--data-dir $(LM1B_DIR)) --json results/likelihood/lm1b-$${c#lm1b:}.json \
	  $(EVAL_EXTRA) || exit 1; done
	$(PY) -m paper.results results/likelihood.md results/likelihood/*.json

reproduce-mcqa:  ## zero-shot HellaSwag, PIQA, SIQA accuracy of the OWT checkpoints -> results/mcqa.md (GPU + Hub)
	@$(NEED_GPU)
	mkdir -p results/mcqa
	$(call FRESH,results/mcqa)
	for c in $(OWT_CKPTS); do for t in hellaswag piqa siqa; do $(call KEPT,results/mcqa/$${c#owt:}-$$t.json) || \
	  $(PY) eval.py --ckpt $$c --task $$t --batch-size 32 --limit $(LIMIT) $(if $(MCQA_DIR),--data-dir $(MCQA_DIR)/$$t) \
	    --json results/mcqa/$${c#owt:}-$$t.json $(EVAL_EXTRA) || exit 1; done; done
	$(PY) -m paper.results results/mcqa.md results/mcqa/*.json

# ---- Table 4: unconditional OWT samples of AR (p 0.90, no penalty, stop 0.005), BD3-LM S = 16 and Set Diffusion smax 32
# (W 16; p 0.95, penalty 1.05, stop 0.01), data/owt.py's preset: UNCOND_N samples from BOS (the official 1000, 1023 new
# tokens each, redrawn by the official filter) scored by generative perplexity under PPL_MODEL (GPT-2 Large) and MAUVE
# against the OWT validation rows (--mauve-ref owt: mean and std over the official's 5 subsets of 1000, ModernBERT-large
# features), replies kept; then the official's throughput runs (200 timed after 50 warm-up, drawn whole, scored by
# nothing), of these and of every LM1B release (its preset: penalty 1.05; MDLM one block of 128). A CUDA GPU and the Hub
# (the checkpoints, gpt2-large, answerdotai/ModernBERT-large, Skylion007/openwebtext or OWT_DIR); transformers and
# mauve-text.
UNCOND_CKPTS ?= owt:ar owt:bd3lm-s16 owt:setdlm-smax32
LM1B_UNCOND_CKPTS ?= $(LM1B_CKPTS)
UNCOND_N ?= 1000
PPL_MODEL ?= gpt2-large
reproduce-unconditional:  ## Table 4 (OWT samples: MAUVE with its bootstrap, gen. perplexity, entropy, tokens/s) and LM1B's unconditional tokens/s (GPU + Hub)
	@$(NEED_GPU)
	mkdir -p results/unconditional
	$(call FRESH,results/unconditional)
	for c in $(UNCOND_CKPTS); do n=$${c#owt:}; \
	  { $(call KEPT,results/unconditional/owt-$$n.json results/unconditional/owt-$$n.jsonl) || \
	  $(PY) eval.py --ckpt $$c --task unconditional -n $(UNCOND_N) --warmup 0 --ppl-model $(PPL_MODEL) --mauve-ref owt \
	    $(if $(OWT_DIR),--data-dir $(OWT_DIR)) --json results/unconditional/owt-$$n.json --replies results/unconditional/owt-$$n.jsonl \
	    $(EVAL_EXTRA); } && { $(call KEPT,results/unconditional/owt-$$n-tput.json) || \
	  $(PY) eval.py --ckpt $$c --task unconditional --throughput-run -n 200 --warmup 50 --json results/unconditional/owt-$$n-tput.json \
	    $(EVAL_EXTRA) $(TIMED_EXTRA); } || exit 1; done
	for c in $(LM1B_UNCOND_CKPTS); do n=$${c#lm1b:}; w=$$(case $$n in mdlm) echo --mdlm-block 128;; esac); \
	  $(call KEPT,results/unconditional/lm1b-$$n-tput.json) || \
	  $(PY) eval.py --ckpt $$c --task unconditional --throughput-run -n 200 --warmup 50 $$w \
	    --json results/unconditional/lm1b-$$n-tput.json $(EVAL_EXTRA) $(TIMED_EXTRA) || exit 1; done
	$(PY) -m paper.results results/unconditional.md results/unconditional/*.json --generation

# ---- OWT and LM1B from scratch, the official recipe: DiT 12 x 768 (--preset dit-owt / dit-lm1b), lr 3e-4 constant after
# 2500 warm-up steps, AdamW betas (0.9, 0.999), no weight decay, clip 1.0, bf16, global batch 512, no EMA, FlexAttention
# on CUDA. OWT: 1M steps at most, the paper evaluates at 300k; LM1B: 1M. NGPU processes (torchrun DDP; 512 must be a
# multiple of NGPU x MICRO), MICRO rows per GPU per micro-batch; the token cache is built first in one process
# (~/.cache/setdiffusion, or OWT_DIR / LM1B_DIR holding local parquet/jsonl copies). CORPUS_SMAX (Set Diffusion) and
# CORPUS_S (BD3-LM) default to smax 16 and S = 16 on OWT (the paper's OWT generation table uses CORPUS_SMAX=32 and S = 16),
# smax 8 and S = 4 on LM1B.
NGPU ?= $(shell nvidia-smi -L 2>/dev/null | wc -l)
MICRO ?= 32
LM1B_MICRO ?= 128
CORPUS_SMAX ?=
CORPUS_S ?=
CORPUS_RECIPE = --lr 3e-4 --warmup 2500 --final-lr 1.0 --beta2 0.999 --weight-decay 0 --grad-clip 1.0 --dtype bfloat16 \
  --ema 0 --save-every 5000 --eval-every 5000 --eval-limit 512

.PHONY: train-owt train-lm1b
train-owt:  ## train M=ar|mdlm|bd3lm|setdiffusion on OpenWebText from scratch, the paper's DiT and recipe (GPUs, days)
	@$(NEED_GPU)
	$(PY) -c "from data import owt; [owt.load(s, $(if $(OWT_DIR),'$(OWT_DIR)',None)) for s in ('train', 'validation')]"
	torchrun --standalone --nproc_per_node=$(NGPU) train.py --model $(M) --data owt --preset dit-owt --seq-len 1024 \
	  $(if $(OWT_DIR),--data-dir $(OWT_DIR)) --batch-size $(MICRO) --grad-accum $$((512 / $(NGPU) / $(MICRO))) \
	  $(call METHOD_SETTINGS,$(or $(CORPUS_SMAX),16),$(or $(CORPUS_S),16)) $(CORPUS_RECIPE) --max-iters 300000 --out-dir out/owt-$(M) $(TRAIN_EXTRA)

train-lm1b:  ## train M=ar|mdlm|bd3lm|setdiffusion on LM1B from scratch, the paper's DiT and recipe (GPUs, days)
	@$(NEED_GPU)
	$(PY) -c "from data import lm1b; [lm1b.load(s, $(if $(LM1B_DIR),'$(LM1B_DIR)',None)) for s in ('train', 'test')]"
	torchrun --standalone --nproc_per_node=$(NGPU) train.py --model $(M) --data lm1b --preset dit-lm1b --seq-len 128 \
	  $(if $(LM1B_DIR),--data-dir $(LM1B_DIR)) --batch-size $(LM1B_MICRO) --grad-accum $$((512 / $(NGPU) / $(LM1B_MICRO))) \
	  $(call METHOD_SETTINGS,$(or $(CORPUS_SMAX),8),$(or $(CORPUS_S),4)) $(CORPUS_RECIPE) --max-iters 1000000 --out-dir out/lm1b-$(M) $(TRAIN_EXTRA)
