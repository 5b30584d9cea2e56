"""Credentials from a git-ignored .env (common/credentials.py): read as python-dotenv reads it (or by its
rules without it), HF_TOKEN and WANDB_API_KEY set only when the environment lacks them, never printed or saved
by a run; other tools' entries never stop a run, and a warning names their line, never their text."""
import io
import logging
import os
import sys

import pytest

from common import cli, credentials
import train
from helpers import ROOT, TINY

SECRET = "hf_FAKEtoken0123456789abcdef"
WANDB = "wandb-fake-key-9876543210"

try:
    import dotenv
except ImportError:                    # test-only (requirements-test.txt), optional at runtime
    dotenv = None


@pytest.fixture
def clean_env(monkeypatch):
    for k in credentials.KEYS:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


@pytest.fixture(params=["python-dotenv", "fallback"])
def reader(request, monkeypatch):
    """Each test runs twice: through python-dotenv, and through credentials.parse as without it."""
    if request.param == "python-dotenv" and dotenv is None:
        pytest.skip("python-dotenv (test-only) is not installed")
    if request.param == "fallback":
        monkeypatch.setitem(sys.modules, "dotenv", None)              # import dotenv: ImportError
    return request.param


def test_dotenv_sets_missing_credentials_only(tmp_path, clean_env, reader):
    env = tmp_path / ".env"
    env.write_text(f"# a comment\n\nexport HF_TOKEN='{SECRET}'\nWANDB_API_KEY = {WANDB}  # inline comment\n"
                   f"OTHER=untouched\n")
    clean_env.setenv("WANDB_API_KEY", "from-the-environment")
    assert credentials.load_dotenv(str(env)) == ["HF_TOKEN"]
    assert os.environ["HF_TOKEN"] == SECRET
    assert os.environ["WANDB_API_KEY"] == "from-the-environment"           # the environment wins
    assert "OTHER" not in os.environ
    clean_env.delenv("WANDB_API_KEY")
    assert credentials.load_dotenv(str(env)) == ["WANDB_API_KEY"] and os.environ["WANDB_API_KEY"] == WANDB
    assert credentials.load_dotenv(str(tmp_path / "absent")) == []
    assert cli.DOTENV == os.path.join(ROOT, ".env")                          # at the repository root


# (a .env text, what HF_TOKEN reads as: python-dotenv's answer, the shells' and docker's)
CASES = [
    ('HF_TOKEN="abc"  # a comment', "abc"), ("HF_TOKEN='a b'", "a b"), ("HF_TOKEN=abc # a comment", "abc"),
    ("HF_TOKEN=abc#def", "abc#def"), ("export HF_TOKEN = v ", "v"), ('HF_TOKEN="a\\"b"', 'a"b'),
    ("HF_TOKEN='a\\nb'", "a\\nb"), ('HF_TOKEN="a\\tb"', "a\tb"), ("HF_TOKEN=", ""), ("HF_TOKEN", None),
    ('HF_TOKEN="abc', None), ('HF_TOKEN="a"b"', None), ("HF_TOKEN='x'y", None),       # a stray quote: skipped
    ('CERT="-----BEGIN\nHF_TOKEN=fake\n-----END"\nHF_TOKEN=real', "real"),             # inside a quoted value
    ("KEY=-----BEGIN\nMIIB AA==\n-----END\nHF_TOKEN=ok", "ok"), ("not an entry\n=x\nHF_TOKEN=ok", "ok"),
    ("  # c\r\n\r\n  A=1\r\nB='x\ny' # z\nHF_TOKEN=ok\r\n", "ok"),
]


@pytest.mark.parametrize("text, value", CASES)
def test_the_fallback_reads_as_python_dotenv(text, value):
    """credentials.parse, used without python-dotenv, gives python-dotenv's value on every case."""
    assert credentials.parse(text)[0].get("HF_TOKEN") == value
    if dotenv is not None:
        assert dotenv.dotenv_values(stream=io.StringIO(text), interpolate=False) == credentials.parse(text)[0]


def test_other_entries_never_stop_a_run_and_warnings_hide_the_text(tmp_path, clean_env, reader, capsys,
                                                                   caplog):
    """Another tool's multi-line value, a line that is not an entry (holding a secret) and an unclosed quote
    are skipped with a warning naming the line, never its text; the credentials after them are read. A stray
    quote sets nothing, a byte-order mark is no part of a name, an unreadable file is a warning."""
    env = tmp_path / ".env"
    env.write_text(f'KEY="-----BEGIN\n{SECRET}\n-----END"\n{SECRET} oops\nA="{SECRET}\nHF_TOKEN={SECRET}\n')
    with caplog.at_level(logging.WARNING):
        assert credentials.load_dotenv(str(env)) == ["HF_TOKEN"]
    assert os.environ["HF_TOKEN"] == SECRET
    said = capsys.readouterr().err + caplog.text
    assert "line 4" in said and "line 5" in said and SECRET not in said
    for content, loaded in ((f'HF_TOKEN="{SECRET}\n', []), (f"\ufeffHF_TOKEN={SECRET}\n", ["HF_TOKEN"])):
        clean_env.delenv("HF_TOKEN", raising=False)
        env.write_bytes(content.encode("utf-8"))
        assert credentials.load_dotenv(str(env)) == loaded
        assert os.environ.get("HF_TOKEN") == (SECRET if loaded else None)
    env.write_bytes(b"HF_TOKEN=\xff\xfe\n")
    capsys.readouterr()
    assert credentials.load_dotenv(str(env)) == [] and "warning: cannot read" in capsys.readouterr().err


def test_a_training_run_never_prints_or_saves_the_token(tmp_path, clean_env, capsys):
    """train.py reads .env (here: the repository's path pointed at a temporary file) and runs, a line that is
    no entry beside the credentials; the token is in its environment but in none of its output and none of the
    files it writes."""
    env = tmp_path / ".env"
    env.write_text(f"HF_TOKEN={SECRET}\n{SECRET} not an entry\nWANDB_API_KEY={WANDB}\n")
    clean_env.setattr(cli, "DOTENV", str(env))
    out = tmp_path / "run"
    train.main(["--model", "ar", *TINY, "--data", f"jsonl:{ROOT}/data/examples/dates.jsonl", "--max-iters",
                "1", "--out-dir", str(out)])
    assert os.environ["HF_TOKEN"] == SECRET and os.environ["WANDB_API_KEY"] == WANDB
    printed = capsys.readouterr()
    for text in (printed.out, printed.err):
        assert SECRET not in text and WANDB not in text
    for root, _, files in os.walk(out):
        for name in files:
            data = open(os.path.join(root, name), "rb").read()
            assert SECRET.encode() not in data and WANDB.encode() not in data, name
