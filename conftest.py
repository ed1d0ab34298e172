"""Root pytest configuration: Hypothesis profiles and the gpu marker's skip rule.

Profiles (choose with ``--hypothesis-profile NAME``):
  dev      default locally: moderate examples, random seeds, local example database.
  ci       derandomized and bounded, for .ci/run: same inputs every run.
  nightly  many examples, no deadline, persistent example database.
"""

from __future__ import annotations

import os

# The CPU tier runs our Triton kernels under the interpreter.  It must be set
# before triton is first imported, which is why it lives at the very top.
if os.environ.get("FLASHVERIFY_NO_INTERPRET") != "1":
    try:
        import torch as _torch

        if not _torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
    except ImportError:  # torch missing: tests will say so on import
        pass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_common = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("dev", max_examples=50, **_common)
settings.register_profile("ci", max_examples=40, derandomize=True, database=None, print_blob=True, **_common)
settings.register_profile(
    "nightly",
    max_examples=20_000,
    database=DirectoryBasedExampleDatabase(os.environ.get("FLASHVERIFY_DB", ".hypothesis/examples")),
    **_common,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; none is visible (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
