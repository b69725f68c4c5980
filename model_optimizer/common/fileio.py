"""Files: written atomically (a temp file beside the target, then a rename, so a crash never
leaves half a result where a finished one is expected), one run at a time per output (run_lock), and
JSON read with errors that name the file and line."""

from __future__ import annotations

import fcntl
import json
import os
import re
import selectors
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def atomic_write(path: str | Path, data: str | bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` in one step (creating its folder). A symlink's target is written, the link
    kept (replacing the link would cut the user's file off from where it lives). The file gets `mode`, else
    an existing file's own permission bits (a 0640 file stays 0640), else 0666 less the umask. No temporary
    file is left on failure. A character device or FIFO (`/dev/null`, `/dev/stdout`, `>(gzip > f)`) is
    written directly, as a shell redirection would: it cannot be renamed over (as root, a rename would make
    /dev/null a regular file for the whole container), and a stream has no half-written state to avoid."""
    if _stream_target(Path(path), "the output"):
        with open(path, "wb") as f:
            f.write(_as_bytes(data))
        return
    target = _link_target(Path(path))
    if mode is None and target.is_file():
        mode = stat.S_IMODE(target.stat().st_mode)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_as_bytes(data))
        os.chmod(tmp, 0o666 & ~current_umask() if mode is None else mode)  # mkstemp makes 0600
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _link_target(path: Path) -> Path:
    """The file a symlink at `path` leads to (through any chain of links; it may not exist yet), else `path`."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def _stream_target(path: Path, flag: str) -> bool:
    """Whether `path` (after its symlinks) is an existing character device or FIFO, which writers open and
    write in place; ValueError for any other existing thing that is neither that nor a regular file or
    folder (a socket, a block device: writing a result over a disk's first bytes is never what was meant)."""
    try:
        mode = path.stat().st_mode
    except OSError:  # missing, or a dangling link: a new file is made
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    kind = "socket" if stat.S_ISSOCK(mode) else "block device" if stat.S_ISBLK(mode) else "special file"
    raise ValueError(
        f"{flag} {path} is a {kind}, which mopt does not write; give a file path "
        "(a FIFO or a character device such as /dev/stdout is written as a stream)"
    )


def staging_dir(target: Path) -> Path:
    """A new empty folder beside `target` to build it in, then rename into place (see `publish_dir`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=target.parent, prefix=_staging_prefix(target)))


def _staging_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


_MKDTEMP_PART = re.compile(r"[a-z0-9_]{8}")
"""What tempfile.mkdtemp adds to staging_dir's prefix: eight of a-z, 0-9 and `_`."""


def is_staging_dir_of(path: Path, target: Path) -> bool:
    """Whether `path`'s name is one staging_dir makes for `target` (`.<target>.tmp-XXXXXXXX`), matched as
    text: not another target's (`.<target>.tmp-x.tmp-XXXXXXXX` is that of `<target>.tmp-x`), nor a user's
    `.<target>.tmp-old`."""
    prefix = _staging_prefix(target)
    return path.name.startswith(prefix) and _MKDTEMP_PART.fullmatch(path.name[len(prefix) :]) is not None


def publish_dir(staging: Path, target: Path) -> None:
    """Rename a folder built by `staging_dir` to `target`, with the modes any file writer gives:
    0777 and 0666 less the umask. mkdtemp makes the folder 0700 and some writers (safetensors) make
    their files 0600, so without this a model folder written here is unreadable to another user,
    such as a container's server that runs as its own uid with the folder mounted read-only."""
    umask = current_umask()
    for root, dirs, files in os.walk(staging):
        os.chmod(root, 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
    os.replace(staging, target)


@contextmanager
def run_lock(lock: Path, output: Path, command: str, flag: str = "--output") -> Iterator[None]:
    """Hold the file `lock` (flock) for the block, for one run writing `output`; ValueError at once when
    another run holds it, so a second run on one output is refused before its work, not after it. The
    file is removed on the way out; a run that locked a file just removed retries on the new one (the
    inode check), so two runs never hold locks on different files for one output. flock excludes on
    local file systems; some network ones do not honour it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(
                f"{flag} {output} is being written by another {command} run (it holds {lock.name}); "
                f"wait for it to finish, or give another {flag}"
            ) from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


def user_cache_dir() -> Path:
    """Where mopt keeps what it measured about this machine: $MOPT_CACHE_DIR, else
    $XDG_CACHE_HOME/model-optimizer, else ~/.cache/model-optimizer."""
    if os.environ.get("MOPT_CACHE_DIR"):
        return Path(os.environ["MOPT_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "model-optimizer"


def names_a_file_inside(name: str) -> bool:
    """Whether a file name a folder's own index gives (a checkpoint's shard map) stays inside that folder:
    relative, without '..' or a drive (a file that is a symlink, as in a Hugging Face cache snapshot, is
    fine: the name is what the index controls)."""
    path = PurePosixPath(name.replace("\\", "/"))
    return bool(path.parts) and not path.is_absolute() and ".." not in path.parts and ":" not in path.parts[0]


def read_json(path: Path) -> Any:
    """The parsed contents of a JSON file that exists; ValueError naming the file if it is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc


def jsonl_values(lines: Iterable[str], source: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number from 1, parsed value) of each non-blank line of a JSONL file; ValueError naming
    `source:line` for a line that is not JSON, or JSON Python will not read: an integer past the int
    digit limit (a ValueError that names no place) or nesting deeper than the recursion limit (a
    RecursionError, which would otherwise be a traceback). A byte order mark before the first line is
    skipped: Windows tools (Notepad, PowerShell, Excel's "CSV UTF-8") begin UTF-8 files with one."""
    for number, line in enumerate(lines, start=1):
        if number == 1:
            line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}:{number}: not JSON ({exc})") from None
        except RecursionError:
            raise ValueError(f"{source}:{number}: JSON nested too deeply to read") from None
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: JSON that cannot be read ({exc})") from None
        yield number, value


INPUT_POLL_SECONDS = 0.1
"""How long a read of a pipe waits before Python looks for a Ctrl-C again."""


def input_chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of an input file in chunks. A pipe or FIFO (`/dev/stdin`, `<(...)`) is waited on with a
    short timeout (a selector) before each read: a SIGINT that lands between Python's check for signals and a
    blocking read() would leave that read waiting for the writer, so the process would ignore Ctrl-C
    for as long as the writer stays silent."""
    fd = os.open(path, os.O_RDONLY)
    waiting = None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            waiting = selectors.DefaultSelector()  # epoll on Linux: any fd number, unlike select()
            try:
                waiting.register(fd, selectors.EVENT_READ)
            except OSError:  # a file that cannot be polled (/dev/null): plain reads, which never wait
                waiting.close()
                waiting = None
        while True:
            if waiting is not None:
                while not waiting.select(INPUT_POLL_SECONDS):
                    pass  # each turn of the loop runs Python's signal handlers
            chunk = os.read(fd, size)
            if not chunk:
                return
            yield chunk
    finally:
        if waiting is not None:
            waiting.close()
        os.close(fd)


def read_input(path: Path) -> bytes:
    """All of an input file's bytes (see `input_chunks`: a pipe's read still answers Ctrl-C)."""
    return b"".join(input_chunks(path))


def _byte_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Lines split after each b"\n" (which they keep) from a stream of chunks."""
    pending: list[bytes] = []  # the current line's pieces: a long line is joined once
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            yield b"".join([*pending, chunk[start : end + 1]])
            pending, start = [], end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending)


def text_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, read lazily; ValueError naming `path:line` for a line that is not
    UTF-8 (a reader in text mode would name neither the file nor the line)."""
    for number, raw in enumerate(_byte_lines(input_chunks(path)), start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path}:{number}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)"
            ) from None


def check_writable_file_path(path: str | Path, flag: str) -> None:
    """ValueError when `path` cannot become a file: it is empty, a folder, a socket, one of its parents is a
    file, or the file system refuses it (permission, read-only, /sys): found out now, not after the work.
    An existing file is replaced through a temporary file in its folder (atomic_write), so that folder must
    take a new entry too; a symlink is judged by its target, which is what gets written."""
    path = _given_path(path, flag, "file")
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file path")
    if _stream_target(path, flag):
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {path} cannot be written: permission denied")
        return
    target = _link_target(path)
    if target.exists():
        if not os.access(target, os.W_OK):
            raise ValueError(f"{flag} {path} cannot be written: permission denied")
        _probe(target.parent, path, flag)
        return
    _check_can_create(target, flag)


def check_writable_folder_path(path: str | Path, flag: str) -> None:
    """ValueError when `path` cannot be (or become) a folder we write in: it is empty, a file, one of its
    parents is a file, or the file system refuses new entries there (permission, read-only, /sys)."""
    path = _given_path(path, flag, "folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file; give a folder")
    if path.is_dir():
        _probe(path, path, flag)
    else:
        _check_can_create(path, flag)


def _given_path(path: str | Path, flag: str, kind: str) -> Path:
    """`path` as a Path; ValueError for an empty one. Path("") is ".", so `--output ''` (an unset shell
    variable, say) would otherwise write into the current folder."""
    if isinstance(path, str) and not path.strip():
        raise ValueError(f"{flag} is empty; give a {kind}")
    return Path(path)


def _check_can_create(path: Path, flag: str) -> None:
    """Whether `path`'s nearest existing parent is a folder that takes a new entry."""
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is None:
        return
    if not parent.is_dir():
        raise ValueError(f"{flag} {path} is inside {parent}, which is a file")
    _probe(parent, path, flag)


WRITE_CHECK_PREFIX = ".mopt-write-check-"
"""The empty folder _probe makes and removes at once."""


def _probe(folder: Path, path: Path, flag: str) -> None:
    """Make and remove an empty folder in `folder`: the one sure test (as root, access() says yes to /sys)."""
    probe = None
    try:
        probe = tempfile.mkdtemp(dir=folder, prefix=WRITE_CHECK_PREFIX)
    except OSError as exc:
        raise ValueError(f"{flag} {path}: nothing can be written in {folder} ({exc.strerror or exc})") from None
    finally:
        if probe is not None:  # removed however the call ends (a Ctrl-C just after the mkdir, too)
            os.rmdir(probe)
