"""Credentials from an untracked file, as the official code offers: HF_TOKEN (gated or private Hugging Face
repos) and WANDB_API_KEY (train.py --wandb) come from the environment, or, where the environment lacks them,
from a git-ignored `.env` file at the repository root:

    HF_TOKEN=hf_...
    export WANDB_API_KEY="..."        # `export `, quotes and comments are allowed

The file is read as python-dotenv reads it (the format docker and shells agree on; an optional package,
imported here, lazily: pip install python-dotenv), else by `parse`, the same rules without variable expansion.
The file may hold other tools' entries too, multi-line quoted values included: only these names are taken
(HUGGING_FACE_HUB_TOKEN too, huggingface_hub's older name), a value already in the environment wins, and an
entry that cannot be parsed, or a file that cannot be read, is a warning that names the line by its number
(never its text), not an error: credentials are optional, a run goes on without them. Values are never
printed, logged or saved: train.py's config.json holds flags, not the environment.
"""
import codecs
import os
import re
import sys

KEYS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")

# python-dotenv's grammar (its dotenv/parser.py): [export ]KEY [= VALUE] [# comment], VALUE 'single', "double"
# or unquoted (not starting with a quote: an unclosed quote makes the entry unparseable, as there)
ENTRY = re.compile(r"""(?:export[^\S\r\n]+)?(?:'([^']+)'|([^=\#\s]+))[^\S\r\n]*
    (?:=[^\S\r\n]*(?:'((?:\\'|[^'])*)'|"((?:\\"|[^"])*)"|((?!['"])[^\r\n]*)))?
    (?:[^\S\r\n]*\#[^\r\n]*)?[^\S\r\n]*(?:\r\n|\n|\r|$)""", re.VERBOSE)
REST_OF_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n|\r)?")
SPACE = re.compile(r"\s*")


def parse(text: str) -> tuple[dict, list[int]]:
    """({name: value}, [line numbers of entries that could not be parsed]) of a .env text by python-dotenv's
    rules: `export ` allowed; 'single' quotes literal but for \\' and \\\\; "double" quotes with backslash
    escapes (\\n, \\", ...), both may span lines; an unquoted value runs to the end of the line, less a
    ` #...` comment and trailing blanks; a NAME alone has no value (None); an entry that is none of these
    is skipped to its line's end. (No ${VAR} expansion: python-dotenv, when installed, does it.)"""
    values, bad, pos = {}, [], 0
    while True:
        pos = SPACE.match(text, pos).end()
        if pos == len(text):
            return values, bad
        if text[pos] == "#":                                                    # a comment
            m = REST_OF_LINE.match(text, pos)
        elif (m := ENTRY.match(text, pos)) is None:
            bad.append(text.count("\n", 0, pos) + 1)
            m = REST_OF_LINE.match(text, pos)
        else:
            single, double, bare = m[3], m[4], m[5]
            values[m[1] or m[2]] = (
                re.sub(r"\\[\\']", lambda e: e[0][1], single) if single is not None else
                re.sub(r"\\[\\'\"abfnrtv]", lambda e: codecs.decode(e[0], "unicode-escape"), double)
                if double is not None else re.sub(r"\s+#.*", "", bare).rstrip() if bare is not None else None)
        pos = m.end()


def read(path: str) -> dict:
    """{name: value} of the .env file at path, by python-dotenv when installed (its own warning names a line
    it cannot parse), else by parse (a warning naming each such line by number). A UTF-8 byte-order mark is
    dropped. A file that cannot be read: a warning, {}."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"warning: cannot read {path} ({getattr(e, 'strerror', None) or type(e).__name__}); "
              f"credentials (HF_TOKEN, WANDB_API_KEY) are taken from the environment alone", file=sys.stderr)
        return {}
    try:
        from dotenv import dotenv_values
    except ImportError:
        values, bad = parse(text)
        for n in bad:
            print(f"warning: {path}, line {n}: not a NAME=VALUE entry, skipped (its text is not shown: it "
                  f"may hold a secret)", file=sys.stderr)
        return values
    import io
    return dict(dotenv_values(stream=io.StringIO(text)))


def load_dotenv(path: str) -> list[str]:
    """Set each of KEYS that the file defines (non-empty) and the environment lacks; returns the names set
    (not their values). No file: nothing to do. Nothing in the file stops a run (module docstring)."""
    if not os.path.exists(path):
        return []
    found = read(path)
    names = [k for k in KEYS if found.get(k) and not os.environ.get(k)]
    for k in names:
        os.environ[k] = found[k]
    return names
