"""Results files written whole or not at all: eval.py --json, paper/results.py's tables and plots.

    with replaced("results/x.json") as f:  # a temporary file beside it, renamed over it when the block ends
        json.dump(m, f)

The temporary file is created fresh in the target's own folder (so the rename is atomic: the same file
system), flushed to disk, and renamed onto the target only when the block finishes; an error, a full disk or
Ctrl-C inside the block removes it and leaves the earlier file as it was. A symlinked target keeps its link:
the file it points to is replaced.

    read_capped(path, limit, flag, fix)      # a user's UTF-8 file of at most limit bytes, or one clear line
"""
import contextlib
import os
import secrets


@contextlib.contextmanager
def replaced(path: str, mode: str = "w", encoding: str | None = "utf-8"):
    """Yield a file open for writing (text mode, UTF-8, or mode="wb") that becomes `path` when the block
    ends."""
    target = os.path.realpath(path)
    folder, name = os.path.split(target)
    while True:                                          # a fresh name: never another writer's temporary file
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.part")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)   # the umask applies, as to open()
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def read_capped(path: str, limit: int, flag: str, fix: str) -> str:
    """The text of a UTF-8 file given to `flag`, read up to limit + 1 bytes (so an endless one, /dev/zero,
    stops there). A file that cannot be read, is larger than limit or is not UTF-8 is a ValueError of one line
    naming the flag and the file, ending in `fix` (what to give instead)."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ValueError(f"cannot read {flag} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise ValueError(f"{flag} {path} is larger than {limit >> 20} MiB: {fix}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{flag} {path} is not UTF-8 text ({e.reason} at byte {e.start}): {fix}") from None
