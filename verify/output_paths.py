"""Where the command line writes its reports: checked before any work starts.

A search can run for minutes or hours; a report directory that turns out to be a file, or
a folder the user cannot write to, must stop the command at the start with a message (exit 2),
not lose the results at the end in a traceback.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class OutputPathError(ValueError):
    """A report path that cannot be written; the message says which flag and what to do."""


def _probe_writable(directory: Path, flag: str, value: str) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".flashverify-write-test-", dir=directory)
    except OSError as e:
        raise OutputPathError(f"{flag} {value}: cannot write in {directory} ({e.strerror or e}); "
                              "give a directory you can write to") from None
    os.close(fd)
    os.unlink(name)


def directory_for_writing(value: str, flag: str) -> Path:
    """``value`` as a directory the command may write into, made if missing (parents too).

    Raises:
        OutputPathError: ``value`` is empty, names an existing file, or the directory cannot
            be made or written to.
    """
    if not value:
        raise OutputPathError(f"{flag} needs a directory name, got an empty string")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{flag} {value}: that is a file, not a directory; give a directory "
                              "(it is made if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{flag} {value}: cannot make that directory ({e.strerror or e}); "
                              "give a directory you can write to") from None
    _probe_writable(path, flag, value)
    return path


def file_for_writing(value: str, flag: str) -> Path:
    """``value`` as a file the command may (over)write; its directory is made if missing.

    Raises:
        OutputPathError: ``value`` is empty or a directory, or its directory cannot be made or
            written to.
    """
    if not value:
        raise OutputPathError(f"{flag} needs a file name, got an empty string")
    path = Path(value)
    if path.is_dir():
        raise OutputPathError(f"{flag} {value}: that is a directory; give a file name")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise OutputPathError(f"{flag} {value}: {parent} is a file, not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{flag} {value}: cannot make {parent} ({e.strerror or e}); "
                              "give a path you can write to") from None
    _probe_writable(parent, flag, value)
    return path
