"""One way to write a file or a folder safely: temp file, fsync, rename, clean-up on error.

Every output bertkit writes goes through this module, so a reader (or a resumed run) sees either
the old complete file or the new complete file, never a torn one. The file is fsynced before the
rename that publishes it and the folder after it: without that, a power cut can publish an empty
file under the final name (the rule SQLite and PostgreSQL's WAL follow).

Files are created with the permissions the umask allows (0666 & ~umask), as any other tool would,
rather than the 0600 that ``tempfile.mkstemp`` gives.

This module is a leaf: it imports nothing of bertkit and nothing heavier than the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_path",
    "atomic_dir",
    "atomic_update_dir",
    "fsync_dir",
    "fsync_tree",
    "file_mode",
    "warn_kept",
]


def file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file under the current umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _dir_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


def fsync_dir(folder: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file and folder under ``root`` (before the rename that publishes it)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def _named(e: BaseException, path: Path, tmp: Path | None = None) -> BaseException:
    """A write failure as an OSError naming ``path``.

    ``write`` on a full disk raises ENOSPC / EFBIG without a file name; safetensors and torch.save
    report the same failures as their own exception types ("I/O error: ... (os error 28)", "file
    write failed"). Each becomes an OSError with the errno (EIO when unknown) and the path, which
    the CLI reports in one line.
    """
    if isinstance(e, OSError):
        inside_tmp = tmp is not None and e.filename is not None and os.fsdecode(e.filename).startswith(str(tmp))
        if (e.filename is None or inside_tmp) and e.errno is not None:
            # a temp name means nothing to the user (and is gone): name what was being written
            return type(e)(e.errno, e.strerror or os.strerror(e.errno), str(path))
        if type(e) is OSError and e.errno is None and re.search(r"requested and \d+ written", str(e)):
            # numpy's short write ("40960 requested and 14936 written") names neither reason nor file
            return OSError(errno.EIO, f"write failed ({e}; is the disk full?)", str(path))
        return e
    if not isinstance(e, Exception):
        return e
    text = str(e)
    m = re.search(r"os error (\d+)", text)
    if m:
        code = int(m.group(1))
        return OSError(code, os.strerror(code), str(path))
    if "file write failed" in text or "write failed" in text:
        return OSError(errno.EIO, "write failed (is the disk full?)", str(path))
    return e


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, mode: int | None = None) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success fsync it and rename it onto ``path``.

    For writers that want a file name (``torch.save``, ``safetensors.save_file``, ``savefig``). On
    any error the temp file is removed and ``path`` is left as it was.
    """
    final = Path(path)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    except OSError as e:  # an unwritable folder: name the output, not a temp name the user never chose
        raise _named(e, final, final.parent / f".{final.name}.") from e
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, file_mode() if mode is None else mode)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        named = _named(e, final, tmp)
        if named is e:
            raise
        raise named from e


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (newlines as given: no platform translation)."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2, **kwargs: Any) -> Path:
    """Write ``obj`` as JSON (UTF-8, non-ASCII kept, trailing newline) atomically."""
    kwargs.setdefault("ensure_ascii", False)
    return atomic_write_text(path, json.dumps(obj, indent=indent, **kwargs) + "\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temp folder beside ``path``; on success publish it as ``path`` in one rename.

    ``path`` must not exist unless ``replace=True``; then the old folder is swapped out and removed
    only after the new one is in place. Callers decide whether ``path`` is theirs to replace: this
    function never checks what the old folder holds. On any error the temp folder is removed and
    ``path`` is untouched.
    """
    final = Path(path)
    if final.exists() and not replace:
        raise FileExistsError(f"{final} already exists")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    except OSError as e:  # an unwritable folder: name the output, not a temp name the user never chose
        raise _named(e, final, final.parent / f".{final.name}.") from e
    try:
        os.chmod(tmp, _dir_mode())
        yield tmp
        fsync_tree(tmp)
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
            os.rmdir(old)
            os.replace(final, old)
            os.replace(tmp, final)
            fsync_dir(final.parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
            fsync_dir(final.parent)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        named = _named(e, final, tmp)
        if named is e:
            raise
        raise named from e


@contextlib.contextmanager
def atomic_update_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temp folder; on success move each of its entries into the folder ``path``.

    For writers that add files to a folder that may hold other files (``save_pretrained`` into an
    existing folder, a model saved next to a run's metrics): a new ``path`` appears complete in one
    rename; into an existing one each written file replaces its namesake in one rename, so a reader
    sees each file old or new, never torn. Entries not written are kept. On any error nothing in
    ``path`` changes.
    """
    final = Path(path)
    if not final.exists():
        with atomic_dir(final) as tmp:
            yield tmp
        return
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        os.chmod(tmp, _dir_mode())
        yield tmp
        fsync_tree(tmp)
        for item in sorted(tmp.iterdir()):
            dest = final / item.name
            if item.is_dir() and dest.is_dir():
                old = Path(tempfile.mkdtemp(prefix=f".{item.name}.", suffix=".old", dir=final))
                os.rmdir(old)
                os.replace(dest, old)
                os.replace(item, dest)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(item, dest)
        fsync_dir(final)
    except BaseException as e:
        named = _named(e, final, tmp)
        if named is e:
            raise
        raise named from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_KEPT_SAID: set[tuple[str, int, int]] = set()


def warn_kept(path: str | os.PathLike, message: str, stacklevel: int = 2) -> None:
    """Warn that a person's file at ``path`` is kept rather than replaced, once a process for the file as
    it stands: a command that claims its folder and the saves inside it all meet the same edited file, and
    one notice says it. An edit made after the notice is a new file, and warns again."""
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key is not None:
        if key in _KEPT_SAID:
            return
        _KEPT_SAID.add(key)
    warnings.warn(message, stacklevel=stacklevel + 1)
