"""Shared test set-up: the scripts' threads (common/cli.py, imported before torch), the Hugging Face
libraries offline, train.py's encoding of the shipped task done once per session for a module that asks
(`train_encodes_once`), a counter of FlexAttention calls (`flex_calls`), and tiny checkpoints that several
files read (never change them: copy them)."""
import hashlib
import os

from common import cli  # before torch: the scripts' short OpenMP spin (common/cli.py)

import pytest

from helpers import METHODS, TINY, YORK, random_checkpoint, text_checkpoints

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))     # pytest.ini's -n: processes side by side
# as the scripts (the cores other jobs leave free), or each worker its share of the cores
cli.set_threads(max(1, cli.usable_cores() // WORKERS) if WORKERS > 1 else 0)
# read when huggingface_hub and datasets are imported (after this): nothing is downloaded, nothing waits
os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")

ENCODED = {}                     # train.encode's results, by everything they depend on; kept for the session


@pytest.fixture(scope="module")
def train_encodes_once():
    """train.encode returns the tensors it computed for the same tokenizer, examples and length earlier in the
    session (encode is a pure function); undone when the module ends. A module asks for it with
    `pytestmark = pytest.mark.usefixtures("train_encodes_once")`."""
    import train
    real = train.encode

    def encode(tok, examples, seq_len, *a, **k):
        key = (tok.name, seq_len, hashlib.sha256(repr(examples).encode()).hexdigest(), a,
               tuple(sorted(k.items())))
        if key not in ENCODED:
            ENCODED[key] = real(tok, examples, seq_len, *a, **k)
        return dict(ENCODED[key])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(train, "encode", encode)
        yield


@pytest.fixture
def flex_calls(monkeypatch):
    """Counts the model's FlexAttention calls (test_flex.py, test_gpu.py)."""
    import model
    calls, flex_attend = [], model.flex_attend

    def counted(*args):
        calls.append(1)
        return flex_attend(*args)
    monkeypatch.setattr(model, "flex_attend", counted)
    return calls


@pytest.fixture(scope="session")
def one_step(tmp_path_factory):
    """AR and Set Diffusion checkpoints trained one step on the shipped task: for the scripts' input and
    output, not for what a model learns."""
    import train
    root = tmp_path_factory.mktemp("one_step")
    for m in ("ar", "setdiffusion"):
        train.main(["--model", m, "--out-dir", str(root / m), *TINY, "--max-iters", "1"])
    return root


@pytest.fixture(scope="session")
def random_ckpts(tmp_path_factory):
    """An untrained byte-level checkpoint of every method on the shipped task (what train.py writes)."""
    root = tmp_path_factory.mktemp("random")
    for m in METHODS:
        random_checkpoint(root / m, m)
    return root


@pytest.fixture(scope="session")
def corpus_ckpts(tmp_path_factory):
    """A tiny text (richard.txt, ~2.4 kB), its token cache and one checkpoint per method trained on it (3
    steps, context 32): what test_shakespeare_eval.py, test_sample_corpus.py and test_harness.py read."""
    return text_checkpoints(tmp_path_factory, "richard.txt", "".join(YORK[:30]), [
        "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "4", "--eval-limit", "2",
        "--warmup", "2", "--seq-len", "32", "--max-iters", "3", "--seed", "1"])
