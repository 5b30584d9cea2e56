"""Credentials from an untracked file, as the official code offers: HF_TOKEN (gated or private Hugging Face
repos) and WANDB_API_KEY (train.py --wandb) come from the environment, or, where the environment lacks them,
from a git-ignored `.env` file at the repository root:

    HF_TOKEN=hf_...
    export WANDB_API_KEY="..."        # `export `, quotes and comments are allowed

Only these names are read (HUGGING_FACE_HUB_TOKEN too, huggingface_hub's older name); a value already in the
environment wins; nothing else in the file is touched. Values are never printed, logged or saved: errors name
a line by its number, not its text, and train.py's config.json holds flags, not the environment.
"""
import os
import re

KEYS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")
DOTENV = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".env")
LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)")


def load_dotenv(path: str = DOTENV) -> list[str]:
    """Set each of KEYS that the file defines and the environment lacks; returns the names set (not their
    values). No file: nothing to do. A line that is not NAME=VALUE is a ValueError naming its number."""
    if not os.path.isfile(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path} ({getattr(e, 'strerror', None) or type(e).__name__}): it should "
                         f"hold NAME=VALUE lines (HF_TOKEN, WANDB_API_KEY)") from None
    found = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = LINE.fullmatch(line)
        if m is None:
            raise ValueError(f"{path}, line {n}: not a NAME=VALUE line (its text is not shown: it may hold a "
                             f"secret); fix or remove it")
        found[m[1]] = value_of(m[2])
    names = [k for k in KEYS if k in found and found[k] and not os.environ.get(k)]
    for k in names:
        os.environ[k] = found[k]
    return names


def value_of(raw: str) -> str:
    """A value as shells and python-dotenv read it: inside matching quotes as is (a ` # comment` after the
    closing quote dropped); unquoted, up to a ` #`."""
    if raw[:1] in ("'", '"'):
        end = raw.find(raw[0], 1)
        if end > 0 and (not raw[end + 1:].strip() or raw[end + 1:].lstrip().startswith("#")):
            return raw[1:end]
    return raw.split(" #", 1)[0].strip()
