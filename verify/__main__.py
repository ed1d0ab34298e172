"""``python -m verify``: see ``verify.cli``."""

import os
import sys

# Our Triton kernels run on a CPU-only machine under the interpreter, which must be
# chosen before triton is first imported.
if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

import warnings  # noqa: E402

# The Triton interpreter evaluates kernels with numpy, which warns on every overflow
# that the kernel (correctly) turns into inf or 0; those warnings are noise here.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\..*")

from verify.cli import main  # noqa: E402

sys.exit(main())
