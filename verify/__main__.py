"""``python -m verify``: see ``verify.cli``."""

import sys

from verify.cli import main

sys.exit(main())
