"""Where the command line writes its reports: checked before any work starts.

A search can run for minutes or hours; a report directory that turns out to be a file, or
a folder the user cannot write to, must stop the command at the start with a message (exit 2),
not lose the results at the end in a traceback.  The checks make nothing: a refused command
leaves no trace, and the command makes its directories when it writes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class OutputPathError(ValueError):
    """A report path that cannot be written; the message says which flag and what to do."""


def _probe_writable(directory: Path, flag: str, value: str) -> None:
    """Raise unless a file can be made in ``directory`` (made and removed again: no trace)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".flashverify-write-test-", dir=directory)
    except OSError as e:
        raise OutputPathError(f"{flag} {value}: cannot write in {directory} ({e.strerror or e}); "
                              "give a directory you can write to") from None
    os.close(fd)
    os.unlink(name)


def _check_makeable(path: Path, flag: str, value: str) -> None:
    """Raise unless ``path`` is a directory that can be written in, or can be made as one:
    nothing is made here (a refused command leaves no trace), the write comes later."""
    if path.exists():
        if not path.is_dir():
            what = "that" if str(path) == value else str(path)
            raise OutputPathError(f"{flag} {value}: {what} is a file, not a directory; give a directory "
                                  "(it is made if missing)")
        _probe_writable(path, flag, value)
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(f"{flag} {value}: {ancestor} is a file, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} {value}: cannot make it inside {ancestor} (no write permission); "
                              "give a directory you can write to")


def directory_for_writing(value: str, flag: str) -> Path:
    """``value`` as a directory the command may write into later (made then, parents too).

    Raises:
        OutputPathError: ``value`` is empty or names an existing file, or the directory (or the
            place it would be made) cannot be written to.
    """
    if not value:
        raise OutputPathError(f"{flag} needs a directory name, got an empty string")
    path = Path(value)
    _check_makeable(path, flag, value)
    return path


def file_for_writing(value: str, flag: str) -> Path:
    """``value`` as a file the command may (over)write later; its directory is made then.

    Raises:
        OutputPathError: ``value`` is empty or a directory, or its directory cannot be made or
            written to.
    """
    if not value:
        raise OutputPathError(f"{flag} needs a file name, got an empty string")
    path = Path(value)
    if path.is_dir():
        raise OutputPathError(f"{flag} {value}: that is a directory; give a file name")
    _check_makeable(path.parent, flag, value)
    return path
