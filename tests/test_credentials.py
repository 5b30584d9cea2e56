"""Credentials from a git-ignored .env (credentials.py): HF_TOKEN and WANDB_API_KEY reach the environment when
it lacks them, never override it, and never appear in what the scripts print or save; a bad line is one line
that does not show its text. python -m pytest -q tests/test_credentials.py"""
import os

import pytest

from common import credentials
import train
from helpers import error_of

SECRET = "hf_FAKEtoken0123456789abcdef"
WANDB = "wandb-fake-key-9876543210"


@pytest.fixture
def clean_env(monkeypatch):
    for k in credentials.KEYS:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_dotenv_sets_missing_credentials_only(tmp_path, clean_env):
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


@pytest.mark.parametrize("raw, value", [
    ('"abc"  # a comment', "abc"), ("'a b'", "a b"), ("abc # a comment", "abc"), ("abc#def", "abc#def"),
    ('"abc', '"abc'), ('"a"b"', '"a"b"'),
])
def test_values_unquote_like_a_shell(raw, value):
    assert credentials.value_of(raw) == value


def test_a_bad_line_names_its_number_not_its_text(tmp_path, clean_env):
    env = tmp_path / ".env"
    env.write_text(f"HF_TOKEN={SECRET}\n{SECRET} oops\n")
    with pytest.raises(ValueError) as e:
        credentials.load_dotenv(str(env))
    assert "line 2: not a NAME=VALUE line" in str(e.value) and SECRET not in str(e.value)
    assert "HF_TOKEN" not in os.environ                                     # nothing set from a bad file


def test_a_training_run_never_prints_or_saves_the_token(tmp_path, clean_env, capsys):
    """train.py reads .env (here: the repository's path pointed at a temporary file) and runs; the token is
    in its environment but in none of its output and none of the files it writes."""
    env = tmp_path / ".env"
    env.write_text(f"HF_TOKEN={SECRET}\nWANDB_API_KEY={WANDB}\n")
    clean_env.setattr(credentials.load_dotenv, "__defaults__", (str(env),))
    out = tmp_path / "run"
    train.main(["--model", "ar", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "2",
                "--max-iters", "1", "--eval-limit", "1", "--max-new-tokens", "4", "--out-dir", str(out)])
    assert os.environ["HF_TOKEN"] == SECRET
    printed = capsys.readouterr()
    for text in (printed.out, printed.err):
        assert SECRET not in text and WANDB not in text
    for root, _, files in os.walk(out):
        for name in files:
            data = open(os.path.join(root, name), "rb").read()
            assert SECRET.encode() not in data and WANDB.encode() not in data, name


def test_a_bad_dotenv_stops_the_script_with_one_line(tmp_path, clean_env):
    env = tmp_path / ".env"
    env.write_text(f"{SECRET}\n")
    clean_env.setattr(credentials.load_dotenv, "__defaults__", (str(env),))
    message = error_of(train.main, ["--model", "ar", "--max-iters", "1", "--out-dir", str(tmp_path / "r")])
    assert "line 1: not a NAME=VALUE line" in message and SECRET not in message
