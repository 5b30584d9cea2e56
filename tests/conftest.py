"""Shared test set-up: train.py encodes the shipped task's 20,000 training problems on every run (seconds on 2
cores), and many tests call train.main; the same encoding is computed once per session here."""
import pytest

import train


@pytest.fixture(scope="session", autouse=True)
def encoded_once():
    cache, real = {}, train.encode

    def encode(tok, examples, seq_len, *a, **k):
        key = (tok.name, seq_len, len(examples), repr(examples[:1]), repr(examples[-1:]), a, tuple(k.items()))
        if key not in cache:
            cache[key] = real(tok, examples, seq_len, *a, **k)
        return dict(cache[key])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(train, "encode", encode)
        yield
