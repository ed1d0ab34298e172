"""Process setup that must happen before anything imports triton.

Both entry points call ``prepare()`` first: ``python -m verify`` (``verify/__main__.py``)
and the ``flashverify`` console script (``verify.__main__:run``).  Nothing in ``verify``'s
package ``__init__`` imports triton, so calling it first in an entry point is early enough.
"""

from __future__ import annotations

import os
import warnings


def prepare() -> None:
    """Select the Triton interpreter on a machine without CUDA and silence its numpy noise.

    Sets ``TRITON_INTERPRET=1`` when it is unset and torch sees no CUDA device (the
    interpreter must be chosen before triton is first imported; a value the user set is
    left alone), and ignores the RuntimeWarnings the interpreter's numpy evaluation
    raises from ``triton.*`` on every overflow a kernel correctly turns into inf or 0.
    Idempotent.
    """
    if "TRITON_INTERPRET" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\..*")
