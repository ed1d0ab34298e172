"""``python -m verify`` and the ``flashverify`` console script: see ``verify.cli``."""

from __future__ import annotations

import sys

from verify import _environment


def run(argv: list[str] | None = None) -> int:
    """The command line after the process setup triton needs (``verify._environment.prepare``).

    Returns ``verify.cli.main(argv)``'s exit code (``argv`` None: the process arguments).
    The ``flashverify`` console script points here, so it gets the same setup as
    ``python -m verify``."""
    _environment.prepare()
    from verify.cli import main  # imported after prepare(): the CLI's imports may reach triton

    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
