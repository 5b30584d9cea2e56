"""Shared test set-up. train.py encodes the shipped task's 20,000 training problems on every run (about a
second on 2 cores); a test module that calls train.main many times asks for the fixture below, by name
(`pytestmark = pytest.mark.usefixtures("train_encodes_once")`), and nothing is patched anywhere else."""
import hashlib

from common import threads  # before torch: the scripts' short OpenMP spin (common/threads.py)

import pytest

threads.set_threads(0)           # as the scripts: the cores other jobs leave free

ENCODED = {}                     # train.encode's results, by everything they depend on; kept for the session


@pytest.fixture(scope="module")
def train_encodes_once():
    """For the module that asks: train.encode returns the tensors it computed for the same tokenizer, examples
    and length earlier in the session (the same values: encode is a pure function); undone when the module
    ends."""
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
