"""Root pytest configuration: Hypothesis profiles, the gpu marker's skip rule, fuzz workers' GPU pinning.

Profiles (choose with ``--hypothesis-profile NAME``):
  dev      default locally: moderate examples, random seeds, local example database.
  ci       derandomized and bounded, for .ci/run: same inputs every run.
  nightly  many examples, no deadline, persistent example database:
           $FLASHVERIFY_DB, a directory (default .hypothesis/examples) or a
           redis://URL (a RedisExampleDatabase shared by several machines; needs
           the ``redis`` package).
  replay   the nightly database, replayed only (no new examples): every
           failure saved there fails again, e.g.
           ``FLASHVERIFY_DB=redis://host:6379/0 pytest tests/fuzz -m nightly
           --hypothesis-profile replay``.  A property with nothing saved is skipped.
"""

from __future__ import annotations

import os

from verify.fuzz import GPUS_ENV, open_database, xdist_worker_gpu  # stdlib only: nothing touches CUDA

# `python -m verify fuzz --engine pytest` on cuda: xdist worker gwK pins itself to one GPU of
# $FLASHVERIFY_FUZZ_GPUS.  CUDA reads CUDA_VISIBLE_DEVICES once, when first initialised, and
# torch.cuda.is_available() below initialises it, so this comes first of all.
_fuzz_gpu = xdist_worker_gpu(os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(GPUS_ENV))
if _fuzz_gpu is not None:
    os.environ["CUDA_VISIBLE_DEVICES"] = _fuzz_gpu

# pytest-xdist workers share the machine's cores, and each one's torch would otherwise start a
# thread per core: -n 2 on 2 cores ran 4 threads, and tests/test_mutants.py took 70 s against
# 54 s with one thread a worker (2026-12-03, the 2-core CPU machine).  Each worker gets its
# share of the cores, before torch is imported (its thread pool reads OMP_NUM_THREADS then),
# and subprocesses the tests start inherit it.  An explicit OMP_NUM_THREADS wins.
_workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
if _workers and _workers.isdigit() and int(_workers) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(_workers))))

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
from hypothesis import HealthCheck, Phase, settings

_common = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
_nightly_db_spec = os.environ.get("FLASHVERIFY_DB") or ".hypothesis/examples"
try:  # a redis:// URL needs the redis package; nothing connects until a nightly test runs
    _nightly_db = open_database(_nightly_db_spec)
except ImportError as _e:
    raise ImportError(f"FLASHVERIFY_DB={_nightly_db_spec} is a Redis URL, but the `redis` package is not "
                      f"installed ({_e}). Install it (pip install redis) or unset FLASHVERIFY_DB.") from None
# derandomize=False explicitly: with CI=true in the environment Hypothesis's default profile is
# derandomized, and profiles inherit it; a nightly run on a CI runner would replay the same inputs
# every night (and HypoFuzz refuses derandomized tests).
settings.register_profile("dev", max_examples=50, derandomize=False, **_common)
settings.register_profile("ci", max_examples=40, derandomize=True, database=None, print_blob=True, **_common)
# No explain phase at night: it re-runs hundreds of variations of a shrunk failure to annotate
# the arguments of a property that takes one `case`, and on a slow target (bf16 attention at
# ~0.5 s an example) that is minutes of a night's budget for no information.
settings.register_profile("nightly", max_examples=20_000, database=_nightly_db, derandomize=False,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink), **_common)
settings.register_profile("replay", parent=settings.get_profile("nightly"), phases=(Phase.explicit, Phase.reuse))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _import_every_module_of_the_suite() -> None:
    """Import every module of the suite's packages now, before any test draws.

    Hypothesis (6.13x and later) mixes the constants of every local module in sys.modules into
    what it generates, and adds a module's when it is first imported.  So a test's draws followed
    the modules earlier tests happened to import: under xdist's worksteal two statistical tests of
    the strategies drew 0 of what they count in one worker and passed alone (CI at 7326d66,
    2026-12-06).  With every module imported first, each worker draws from the same pool whatever
    ran before.  A module whose optional dependency is missing is left out, the same way in every
    worker of a run."""
    import importlib
    import pkgutil

    root = os.path.dirname(os.path.abspath(__file__))
    for package in ("strategies", "verify", "kernels", "reports"):
        for info in pkgutil.walk_packages([os.path.join(root, package)], prefix=f"{package}."):
            if info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass


_import_every_module_of_the_suite()


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
