"""Results files written whole or not at all: eval.py --json, paper/results.py's tables and plots.

    with replaced("results/x.json") as f:  # a temporary file beside it, renamed over it when the block ends
        json_dump(m, f)                   # common/checkpoint.py: no Infinity or NaN token

The temporary file is created fresh in the target's own folder (so the rename is atomic: the same file
system), flushed to disk, and renamed onto the target only when the block finishes; an error, a full disk or
Ctrl-C inside the block removes it and leaves the earlier file as it was. A symlinked target keeps its link:
the file it points to is replaced. Only a regular file (or a new name) is ever renamed over: a stream, a
device, a pipe or a terminal (`--json /dev/stdout`, even when the shell sends stdout to a file) is written in
place, appended to as a shell's `>>` would, and a write-protected file is refused as open() refuses it.

    read_capped(path, limit, flag, fix)      # a user's UTF-8 file of at most limit bytes, or one clear line
    figure_format(path, flag)                # the picture format a file name's suffix names, or one line
"""
import contextlib
import errno
import os
import re
import secrets
import stat
import sys

FD_FOLDER = re.compile(r"/proc/[^/]+(/task/[^/]+)?/fd")   # where /dev/stdout and /dev/fd/N lead


def stream(path: str) -> bool:
    """Whether path is no file to replace: a device, pipe, socket or terminal, or an open descriptor's link
    (/dev/stdout -> /proc/self/fd/1 -> whatever the shell redirected it to, a log file included)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return True
    except OSError:                                   # absent, or a dangling link: a new regular file
        return False
    p = os.path.abspath(path)
    for _ in range(40):                               # the link chain, as the kernel follows it
        if not os.path.islink(p):
            return False
        if FD_FOLDER.fullmatch(os.path.realpath(os.path.dirname(p))):
            return True
        p = os.path.join(os.path.dirname(p), os.readlink(p))
    return False


def writable(path: str):
    """Raise PermissionError, as open(path, "w") would, when path is a file this process may not write (a
    write-protected results file is not replaced behind its owner's back)."""
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


@contextlib.contextmanager
def replaced(path: str, mode: str = "w", encoding: str | None = "utf-8"):
    """Yield a file open for writing (text mode, UTF-8, or mode="wb") that becomes `path` when the block
    ends (a stream: written in place, see the module docstring)."""
    writable(path)
    if stream(path):
        sys.stdout.flush()                            # what was printed comes first when it is the same file
        # a pipe no process reads would block open() for ever: O_NONBLOCK makes that ENXIO, one line
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        except OSError as e:
            raise OSError(e.errno, "no process reads this pipe" if e.errno == errno.ENXIO else e.strerror,
                          path) from None
        os.set_blocking(fd, True)
        with os.fdopen(fd, mode.replace("w", "a"), encoding=None if "b" in mode else encoding) as f:
            yield f
        return
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


def figure_format(path: str, flag: str) -> str:
    """The format matplotlib writes for path: its suffix (x.pdf is a PDF, never PNG bytes under that name);
    a suffix matplotlib cannot write, or none, is a ValueError of one line (matplotlib must be installed)."""
    from matplotlib.backend_bases import FigureCanvasBase
    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(path)[1][1:].lower()
    if suffix not in kinds:
        raise ValueError(f"{flag} {path}: the file's suffix names the picture's format, and matplotlib "
                         f"writes {', '.join(sorted(kinds))}: name it e.g. .png, .pdf or .svg")
    return suffix


def read_capped(path: str, limit: int, flag: str, fix: str) -> str:
    """The text of a UTF-8 file given to `flag`, read up to limit + 1 bytes (so an endless one, /dev/zero,
    stops there), without the byte-order mark some editors put first (it is not text). A file that cannot be
    read, is larger than limit or is not UTF-8 is a ValueError of one line naming the flag and the file,
    ending in `fix` (what to give instead)."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ValueError(f"cannot read {flag} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise ValueError(f"{flag} {path} is larger than {limit >> 20} MiB: {fix}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{flag} {path} is not UTF-8 text ({e.reason} at byte {e.start}): {fix}") from None
