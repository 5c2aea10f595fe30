"""The rule for every command that writes a folder: never lose a user's files.

* A command writes into a new or an empty folder.
* A non-empty folder that is not the command's own earlier output is refused, with an error that
  names it and says what to do.
* The command's own earlier output is replaced only with ``overwrite=True`` (``--overwrite``), and
  even then only the files that the earlier run wrote are removed; anything else stays. A file
  written for people to edit (the model card, README.md) that someone has edited since is theirs
  now: it stays too, with a warning (the marker keeps its digest for this).
* ``resume=True`` (``--resume``) continues the earlier run only when it is the same run (the same
  command, settings, model configuration, data, objective); otherwise the error lists what differs.
* A command never writes into a folder that holds one of its inputs (:func:`check_not_input`).

A folder is recognised as a command's output by the marker file :data:`MARKER` that the command
writes first: the command's name, the run's identity (``run``, compared on resume) and, once the
command finishes, the list of entries it wrote. A run killed before finishing leaves the marker
without that list; then the command's known entry names (``owned``) stand in for it.

A failed command leaves no empty output folder behind: :meth:`OutputClaim.abandon` removes the
marker and the folder when nothing else was written.

One process writes a folder at a time: a claim holds an exclusive lock on :data:`LOCK` in the folder
until the command finishes or fails, so a second command on the same folder (``--overwrite`` or
``--resume`` included) is refused while the first runs, naming its process, instead of removing
files under it. The operating system drops the lock when its process dies, so a killed run's folder
is free at once and a stale lock file is simply taken over.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bertkit import _args as A
from bertkit._io import atomic_write_json, warn_kept

__all__ = [
    "LOCK",
    "MARKER",
    "OutputBusy",
    "OutputClaim",
    "RunFinished",
    "check_not_input",
    "check_output_file",
    "claim_output_dir",
    "file_fingerprint",
    "held",
    "within_claim",
]

MARKER = ".bertkit-output.json"
LOCK = ".bertkit-output.lock"
R = TypeVar("R")
# Files a command writes for people to read and edit: the marker keeps their digests, and an
# edited one is not replaced. (The rest are the run's own: weights, configs, logs, which later
# commands may rewrite in place.)
EDITABLE = ("README.md",)
DIGEST_MAX_BYTES = 1 << 20


def _digest(path: Path) -> str | None:
    """sha256 of an :data:`EDITABLE` regular file of at most :data:`DIGEST_MAX_BYTES` (else None)."""
    try:
        if path.name not in EDITABLE or path.is_symlink() or not path.is_file():
            return None
        if path.stat().st_size > DIGEST_MAX_BYTES:
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class RunFinished(Exception):
    """``resume`` asked for a run that finished and kept nothing to continue from: nothing to do
    (the command-line tools say so and exit 0). Not an error: the finished output is left as it is."""


def _read_marker(folder: Path) -> dict[str, Any] | None:
    f = folder / MARKER
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("command"), str) else None


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in (MARKER, LOCK))


class OutputBusy(FileExistsError):
    """The output folder is being written by another live process (see :func:`claim_output_dir`)."""


try:
    import fcntl
except ImportError:  # not POSIX: folders are not locked there
    fcntl = None  # type: ignore[assignment]

# Locks this process holds, by folder: a claim left unreleased by an earlier failure in the same
# process (a notebook keeps the failed call's frames) hands its lock over instead of refusing.
_HELD: dict[str, int] = {}


def _lock_key(folder: Path) -> str:
    return os.path.realpath(folder)


def _holder(path: Path) -> str:
    """Who holds the lock file ``path``, as its holder wrote it (best effort)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["since"])))
        return f"`bertkit {info['command']}` (process {int(info['pid'])}, since {when})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another bertkit process"


def _lock(folder: Path, command: str, say: Callable[..., str], probe: bool = False) -> None:
    """Take the exclusive lock of ``folder`` for ``command`` (``probe``: only check that nobody holds
    it; nothing where locks are unavailable). Raises :class:`OutputBusy` naming the holder while
    another process holds it; ``say`` names the folder's setting."""
    key = _lock_key(folder)
    if fcntl is None or key in _HELD:
        return
    path = folder / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                path.unlink(missing_ok=True)
                return  # a file system without locks (some network mounts): unlocked, as before
            if not isinstance(e, BlockingIOError):
                raise
            raise OutputBusy(
                f"{say(folder)} is being written by {_holder(path)}; wait for it to finish, or choose "
                f"another {say()} (a killed run frees its folder at once)"
            ) from None
        # The holder unlinks the file before it lets go: a lock taken on an unlinked file is no lock.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    if probe:
        _release_fd(path, fd)
        return
    info = json.dumps({"command": command, "pid": os.getpid(), "since": time.time()})
    os.ftruncate(fd, 0)
    os.pwrite(fd, info.encode("utf-8"), 0)
    _HELD[key] = fd


def _release_fd(path: Path, fd: int) -> None:
    try:
        # while still held, so a process waiting on this file sees it is gone; only if it is still the
        # file held here (a folder replaced by a rename may hold another process's lock file by now)
        if os.path.samestat(os.fstat(fd), os.stat(path)):
            path.unlink()
    except OSError:
        pass
    os.close(fd)


def _unlock(folder: Path) -> None:
    """Let go of the lock this process holds on ``folder`` (no-op when it holds none)."""
    fd = _HELD.pop(_lock_key(folder), None)
    if fd is not None:
        _release_fd(folder / LOCK, fd)


@contextlib.contextmanager
def held(folder: str | os.PathLike, command: str, say: Callable[..., str]) -> Iterator[None]:
    """Hold ``folder``'s exclusive lock for ``command`` while the block runs: a work folder that a
    command fills outside its claimed output (``say`` names it in the message a second live writer
    gets, :class:`OutputBusy`). A killed holder frees it at once; its lock file stays, free."""
    folder = Path(folder)
    if _lock_key(folder) in _HELD or not folder.is_dir():  # held here already (the outer holder lets
        yield  # go), or no folder: the caller's own checks say what is wrong
        return
    _lock(folder, command, say)
    try:
        yield
    finally:
        _unlock(folder)


def _show(names: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _differences(
    old: dict[str, Any], new: dict[str, Any], prefix: str = "", defaults: Mapping[str, Any] | None = None
) -> list[str]:
    """``key: was X, now Y`` for every leaf that differs between two run descriptions.

    ``defaults`` (nested like the descriptions): the value a leaf the earlier run did not record
    had then, e.g. a setting added to bertkit since, which that run ran at its default.
    """
    out = []
    defaults = defaults or {}
    keys = set(old) | set(new)
    if not prefix and set(old) & set(new):
        # A section the earlier run did not record (written by an older bertkit) is not compared;
        # runs with no section in common (a recipe's folder and a single run's) differ in everything.
        keys = set(old) & set(new)
    for key in sorted(keys, key=str):
        a, b = old.get(key, defaults.get(key)), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            sub = defaults.get(key)
            out += _differences(a, b, f"{prefix}{key}.", sub if isinstance(sub, Mapping) else None)
        elif a != b:
            out.append(f"{prefix}{key}: was {json.dumps(a)}, now {json.dumps(b)}")
    return out


@dataclass
class OutputClaim:
    """A folder a command may write into (see :func:`claim_output_dir`)."""

    path: Path
    command: str
    run: dict[str, Any]
    created: bool  # the folder did not exist before this command
    foreign: set[str] = field(default_factory=set)  # entries that are not this command's to touch
    resumed: bool = False

    def marker(self, files: Sequence[str] | None = None, folder: Path | None = None) -> dict[str, Any]:
        """The marker's content; with ``files``, their list and (read from ``folder``, default the
        output) the digests of the :data:`EDITABLE` ones."""
        data: dict[str, Any] = {"command": self.command, "run": self.run}
        if files is not None:
            data["files"] = sorted(files)
            where = Path(folder or self.path)
            digests = {n: d for n in data["files"] if (d := _digest(where / n)) is not None}
            if digests:
                data["digests"] = digests
        return data

    def write_marker(self, folder: str | os.PathLike | None = None) -> None:
        """Mark ``folder`` (default: the output) as this command's output, before writing into it."""
        atomic_write_json(Path(folder or self.path) / MARKER, self.marker(), indent=1)

    def release(self) -> None:
        """Let go of the folder's lock (for a caller that writes its marker itself)."""
        _unlock(self.path)

    def finish(self) -> None:
        """Record the entries this command wrote (all but the foreign ones) in the marker; let go of the folder."""
        try:
            if not self.path.is_dir():
                return
            files = [n for n in _entries(self.path) if n not in self.foreign and not n.startswith(".")]
            atomic_write_json(self.path / MARKER, self.marker(files), indent=1)
        finally:
            _unlock(self.path)

    def abandon(self) -> None:
        """After a failure: remove the marker, and the folder if it was new, when nothing else is in it;
        let go of the folder."""
        _unlock(self.path)
        if not self.path.is_dir() or self.resumed:
            return
        if _entries(self.path):
            return
        (self.path / MARKER).unlink(missing_ok=True)
        if self.created:
            try:
                self.path.rmdir()
            except OSError:
                pass


def within_claim(claim: OutputClaim | None, work: Callable[[], R]) -> R:
    """Run ``work()``; on failure leave no empty output folder behind, on success record what was written."""
    try:
        result = work()
    except BaseException:
        if claim is not None:
            claim.abandon()
        raise
    if claim is not None:
        claim.finish()
    return result


def claim_output_dir(
    path: str | os.PathLike,
    command: str,
    *,
    overwrite: bool = False,
    resume: bool = False,
    run: dict[str, Any] | None = None,
    owned: Sequence[str] = (),
    can_resume: bool = False,
    create: bool = True,
    dry_run: bool = False,
    legacy: Callable[[Path], bool] | None = None,
    resume_needs: Sequence[str] = ("checkpoints",),
    run_defaults: Mapping[str, Any] | None = None,
    flag: str = "--output",
    name: str | None = None,
) -> OutputClaim:
    """Check that ``command`` may write into the folder ``path``; return the claim.

    Raises FileExistsError (naming the folder and what to do) for a non-empty folder that is not
    ``command``'s output, or is its output but neither ``overwrite`` nor ``resume`` was given;
    ValueError when ``resume`` finds a run that differs from ``run`` (the message lists the
    differences). With ``overwrite`` the earlier run's entries (its marker's list, else the names
    in ``owned`` that exist) are removed now, and nothing else. With ``create`` the folder is made
    and marked at once; otherwise the caller publishes it (e.g. with ``bertkit._io.atomic_dir``)
    after calling :meth:`OutputClaim.write_marker` on its temp folder. ``dry_run`` checks
    everything and changes nothing (to fail before hours of preparation, not after).

    ``owned`` holds names or glob patterns of the entries ``command`` writes. ``legacy(folder)``
    tells an unmarked folder written by an older bertkit; its ``owned`` entries count as the
    command's. An unmarked folder is resumed only when it holds one of ``resume_needs`` (what an
    interrupted run leaves, e.g. its checkpoints): a folder of a user's files never is.
    ``run_defaults`` (nested like ``run``): what a part of ``run`` that the earlier run did not
    record was then, e.g. the default of a setting bertkit has gained since. ``flag`` (and ``name``, the
    Python argument when it is not the flag's) names the folder in the messages.
    """
    if dry_run:
        create = False
    folder = Path(path)
    run = dict(run or {})
    say = functools.partial(A.said, flag, name=name)
    flag_hint = f"{A.switch('overwrite')} to replace it (only the files it wrote are replaced)"
    if can_resume:
        flag_hint = f"{A.switch('resume')} to continue it, or {flag_hint}"
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{say(folder)} is a file, not a folder; choose a new or empty folder")
    if not folder.exists():
        claim = OutputClaim(folder, command, run, created=True)
        if create:
            folder.mkdir(parents=True)
            _lock(folder, command, say)  # held until finish, abandon or release
            claim.write_marker()
        return claim
    # Before anything is read or removed: a folder another live process writes is refused.
    _lock(folder, command, say, probe=dry_run)
    try:
        return _claim_existing(
            folder,
            command,
            run,
            overwrite,
            resume,
            owned,
            can_resume,
            create,
            dry_run,
            legacy,
            resume_needs,
            run_defaults,
            say,
            flag_hint,
        )
    except BaseException:
        _unlock(folder)
        raise


def _claim_existing(
    folder: Path,
    command: str,
    run: dict[str, Any],
    overwrite: bool,
    resume: bool,
    owned: Sequence[str],
    can_resume: bool,
    create: bool,
    dry_run: bool,
    legacy: Callable[[Path], bool] | None,
    resume_needs: Sequence[str],
    run_defaults: Mapping[str, Any] | None,
    say: Callable[..., str],
    flag_hint: str,
) -> OutputClaim:
    """:func:`claim_output_dir` for a folder that exists (and whose lock this process holds)."""
    entries = _entries(folder)
    marker = _read_marker(folder)
    mine = [n for n in entries if any(fnmatch.fnmatchcase(n, pat) for pat in owned)]
    if marker is None and entries and legacy is not None and legacy(folder):
        marker = {"command": command, "run": run if resume else {}, "files": mine}
    if marker is None and resume and can_resume and mine and any(n in mine for n in resume_needs):
        # A run written before folders were marked: resumable, and marked from now on.
        claim = OutputClaim(
            folder, command, run, created=False, resumed=True, foreign={n for n in entries if n not in mine}
        )
        if not dry_run:
            claim.write_marker()
        return claim
    if marker is None:
        if entries:
            raise FileExistsError(
                f"{say(folder)} is not empty ({_show(entries)}) and is not the output of `bertkit "
                f"{command}`; bertkit writes only into a new or empty folder: choose another {say()}, or "
                "move those files away"
            )
        claim = OutputClaim(folder, command, run, created=False)
        if create:
            claim.write_marker()
        return claim
    return _claim_marked(
        folder,
        command,
        run,
        marker,
        entries,
        mine,
        overwrite,
        resume and can_resume,
        create,
        dry_run,
        flag_hint,
        run_defaults,
        say,
        resume_needs,
    )


def _claim_marked(
    folder: Path,
    command: str,
    run: dict[str, Any],
    marker: dict[str, Any],
    entries: list[str],
    mine: list[str],
    overwrite: bool,
    resume: bool,
    create: bool,
    dry_run: bool,
    flag_hint: str,
    run_defaults: Mapping[str, Any] | None,
    say: Callable[..., str],
    resume_needs: Sequence[str],
) -> OutputClaim:
    """:func:`claim_output_dir` for a folder that holds a marked output: resume it, replace it, or refuse."""
    if marker["command"] != command:
        raise FileExistsError(
            f"{say(folder)} holds the output of `bertkit {marker['command']}`, not of "
            f"`bertkit {command}`; choose another {say()}"
        )
    ours = set(marker.get("files") or mine) & set(entries)
    digests = marker.get("digests") if isinstance(marker.get("digests"), dict) else {}
    edited = sorted(n for n in ours if n in digests and _digest(folder / n) != digests[n])
    ours -= set(edited)  # changed by hand since the run wrote them: the user's now
    foreign = {n for n in entries if n not in ours}
    if resume:
        # An empty ``run`` is a check made before the run's identity is known (e.g. a dry run).
        diffs = _differences(marker.get("run") or {}, run, defaults=run_defaults) if run else []
        if diffs:
            raise ValueError(
                f"{A.flag('resume')}: {folder} holds a different run; "
                + "; ".join(diffs)
                + f". Resume with the same settings, or write the new run to another {say()}"
            )
        if marker.get("files") is not None and not any((folder / n).exists() for n in resume_needs):
            # Finished (its list of files is written last) and kept no checkpoint: resuming would
            # start the whole run over, on top of its own finished output.
            raise RunFinished(
                f"{A.flag('resume')}: the run in {folder} already finished and kept nothing to continue from (no "
                f"{' or '.join(resume_needs)}); nothing to do. To train further, start a new run in another "
                f"{say()}"
            )
        return OutputClaim(folder, command, run, created=False, foreign=foreign, resumed=True)
    if not overwrite:
        if not ours and not foreign:
            claim = OutputClaim(folder, command, run, created=False)
            if create:
                claim.write_marker()
            return claim
        raise FileExistsError(
            f"{say(folder)} already holds the output of an earlier `bertkit {command}`; "
            f"pass {flag_hint}, or choose another {say()}"
        )
    if dry_run:
        return OutputClaim(folder, command, run, created=False, foreign=foreign)
    if edited:
        them = "them" if len(edited) > 1 else "it"
        message = (
            f"{say(folder)}: {_show(edited)} changed since `bertkit {command}` wrote {them}: kept, not "
            f"replaced (move {them} away for the new run's own)"
        )
        warn_kept(folder / edited[0], message, stacklevel=3)  # the save that follows meets it too: one notice
    for name in sorted(ours):
        p = folder / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    claim = OutputClaim(folder, command, run, created=False, foreign=foreign)
    if create:
        claim.write_marker()
    return claim


def check_output_file(
    path: str | os.PathLike, overwrite: bool = False, flag: str = "--output", name: str | None = None
) -> Path:
    """A file a command will write: refuse to replace an existing one unless ``overwrite``. ``flag``
    (and ``name``, the Python argument when it is not the flag's) names it in the messages."""
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{A.said(flag, p, name)} is a folder; give a file name")
    if p.exists() and not overwrite:
        raise FileExistsError(
            f"{A.said(flag, p, name)} already exists; pass {A.switch('overwrite')} to replace it, or choose "
            "another name"
        )
    return p


def check_not_input(
    output: str | os.PathLike,
    inputs: Mapping[str, str | os.PathLike | None],
    flag: str = "--output",
    name: str | None = None,
) -> None:
    """Refuse an ``output`` that is one of the ``inputs`` (``{"--flag": path}``), lies inside an input
    folder, or holds one: writing there would replace or remove the very files the command reads (the
    teacher's weights under the student's, a checkpoint continued from). Refused before anything is
    read, and even with ``--overwrite``."""
    out = Path(output)
    try:
        out_r = out.resolve()
    except OSError:
        return
    for key, path in inputs.items():
        if path is None:
            continue
        try:
            src = Path(path).resolve()
        except OSError:
            continue
        label = A.said(key, path) if key.startswith("-") else str(path)
        kind = "model folder" if src.is_dir() else "file"
        said = A.said(flag, out, name)
        if out_r == src:
            raise ValueError(
                f"{said} is the input {kind} {label}: a command never writes over its own "
                f"input; choose another {A.said(flag, name=name)}"
            )
        if src.is_dir() and src in out_r.parents:
            raise ValueError(
                f"{said} is inside the input model folder {label}: a command never writes "
                f"into its own input; choose a path outside it"
            )
        if out_r in src.parents:
            raise ValueError(
                f"{said} holds the input {kind} {label}: a command never writes into its own "
                f"input; choose another {A.said(flag, name=name)}"
            )


def refuse_inside_input(
    output: str | os.PathLike, *inputs: str | os.PathLike, flag: str = "--output", name: str | None = None
) -> None:
    """:func:`check_not_input` for inputs given by position (model folders, corpus or data files)."""
    check_not_input(output, {f"input {i + 1}": p for i, p in enumerate(inputs)}, flag=flag, name=name)


def file_fingerprint(*paths: str | os.PathLike | None, whole_up_to: int = 64 << 20) -> str:
    """A short content hash of files (None skipped): whole files up to ``whole_up_to`` bytes, else the
    size and the first and last MiB (a weights file of gigabytes is not read through for this)."""
    h = hashlib.sha256()
    for p in paths:
        if p is None:
            continue
        p = Path(p)
        size = p.stat().st_size
        h.update(f"{size}\0".encode())
        with open(p, "rb") as f:
            if size <= whole_up_to:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            else:
                h.update(f.read(1 << 20))
                f.seek(size - (1 << 20))
                h.update(f.read(1 << 20))
    return h.hexdigest()[:16]
