"""The library interface for users' own tests.

Two levels:

* ``check_softmax(fn, ...)`` / ``check_attention(fn, ...)`` run a whole
  Hypothesis search on a callable and raise ``AssertionError`` with the shrunk
  counterexample, the worst element and the replay command.
* ``assert_softmax_correct(fn, x)`` / ``assert_attention_correct(fn, inputs)``
  check one input, for use inside a user's own ``@given`` test with the
  strategies of ``strategies``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from kernels.registry import Target
from verify import artifacts, engine, search
from verify.capabilities import Capabilities


#: Modules pytest collects (test_*.py, *_test.py, conftest.py): importable by name only with the
#: sys.path pytest set up, so their functions are recorded by file path instead.
_TEST_MODULE = re.compile(r"(^|\.)(test_[^.]*|[^.]*_test|conftest)$")


def importable_spec(fn: Callable) -> tuple[str | None, str]:
    """How ``python -m verify replay`` can load ``fn`` again: ``(spec, "")`` or ``(None, why not)``.

    ``spec`` is ``module:qualname`` for a top-level function (or class attribute) of an
    importable module, and ``/abs/path/file.py:qualname`` for one defined in ``__main__``
    or in a test module (whose module name only resolves under pytest's sys.path).  A
    lambda, a function defined inside another, a bound method or a callable object has
    no such spec.
    """
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None, f"{fn!r} has no __module__ and __qualname__ to import it by"
    if "<" in qualname:
        return None, f"{qualname} is a lambda or is defined inside a function"
    module = sys.modules.get(module_name)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if module is None or obj is not fn:
        return None, f"{module_name}.{qualname} does not name it (a bound method, or a callable object?)"
    if module_name == "__main__" or _TEST_MODULE.search(module_name):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            return None, f"{qualname} is defined in {module_name}, which has no .py file to load it from"
        return f"{Path(file).resolve()}:{qualname}", ""
    return f"{module_name}:{qualname}", ""


def _as_target(fn: Callable, op: str, caps: Capabilities | None, name: str | None) -> Target:
    """``fn`` as a user Target, named ``name``, else by its ``importable_spec`` (so that the replay
    command of a saved counterexample can load it), else by its qualified name."""
    caps = caps or getattr(fn, "flashverify_capabilities", None) or Capabilities()
    if name is None:
        name = importable_spec(fn)[0] or getattr(fn, "__qualname__", repr(fn))
    return Target(name, op, fn, caps, "user callable", kind="user")


def _replay_line(artifact: str, not_importable: str | None) -> str:
    if not_importable is None:
        return f"  replay: {artifacts.replay_command(artifact)}"
    return (f"  replay: no command: the target cannot be loaded by `python -m verify replay` ({not_importable}); "
            f"define it at the top level of a module, or pass name='MODULE:FUNC' naming where it can be "
            f"imported, to get one. The counterexample is saved in {artifact}")


def _raise_if_violated(cells: list[search.CellResult], not_importable: str | None = None) -> None:
    """Raise AssertionError listing every violated cell; ``not_importable`` (why the target
    cannot be loaded by name) replaces the replay command, which could not work."""
    bad = [c for c in cells if c.status == "violated"]
    if not bad:
        return
    lines = []
    for c in bad:
        v = c.violation
        lines.append(f"{c.target} ({c.op}, {c.dtype}) violated its contract: {v.one_line()}")
        if c.counterexample:
            lines.append(f"  counterexample: {c.counterexample}")
        if c.artifact:
            lines.append(_replay_line(c.artifact, not_importable))
    raise AssertionError("\n".join(lines))


def _search(fn: Callable, op: str, caps: Capabilities | None, name: str | None,
            opts: search.CheckOptions) -> list[search.CellResult]:
    """Search ``fn`` as a target of ``op``, named ``name`` (trusted) or by its importable spec;
    raise if a cell violated, with a replay command only where replay can load ``fn``."""
    why = None
    if name is None:
        name, why = importable_spec(fn)
    cells = search.check_target(_as_target(fn, op, caps, name or getattr(fn, "__qualname__", repr(fn))), opts)
    _raise_if_violated(cells, why or None)  # "" or None: replay can load it
    return cells


def _options(dtypes, device, max_examples, seed, masked_rows, artifact_dir) -> search.CheckOptions:
    return search.CheckOptions(
        dtypes=tuple(dtypes) if dtypes else None, device=device, max_examples=max_examples, seed=seed,
        masked_rows=masked_rows, artifact_dir=artifact_dir,
        profile=search.PROFILES["gpu" if device.startswith("cuda") else "cpu"],
    )


def check_softmax(
    fn: Callable[[torch.Tensor], torch.Tensor], *, dtypes: Sequence[str] | None = None, device: str = "cpu",
    max_examples: int = 100, seed: int | None = None, masked_rows: str = "declared",
    caps: Capabilities | None = None, name: str | None = None,
    artifact_dir: str = str(artifacts.DEFAULT_DIR),
) -> list[search.CellResult]:
    """Search for inputs on which ``fn`` is not a correct softmax over the last dim; raise if found.

    The saved counterexample records the target as ``name``, else as ``importable_spec(fn)``
    (``module:qualname``, or ``/abs/file.py:qualname`` for a test module or ``__main__``), so
    the replay command in the AssertionError loads ``fn`` again; for a lambda or a nested
    function it says why there is no such command."""
    return _search(fn, "softmax", caps, name, _options(dtypes, device, max_examples, seed, masked_rows, artifact_dir))


def check_attention(
    fn: Callable[..., torch.Tensor], *, dtypes: Sequence[str] | None = None, device: str = "cpu",
    max_examples: int = 100, seed: int | None = None, masked_rows: str = "declared",
    caps: Capabilities | None = None, name: str | None = None,
    artifact_dir: str = str(artifacts.DEFAULT_DIR),
) -> list[search.CellResult]:
    """Search for inputs on which ``fn(q, k, v, *, scale, causal, mask)`` is wrong; raise if found.

    The target is recorded for replay as in ``check_softmax``."""
    return _search(fn, "attention", caps, name,
                   _options(dtypes, device, max_examples, seed, masked_rows, artifact_dir))


def _raise_evaluation(out: engine.CaseOutcome, what: str) -> engine.CaseOutcome:
    if out.evaluation.violations:
        raise AssertionError(f"{what}: " + "; ".join(v.one_line() for v in out.evaluation.violations))
    return out


def assert_softmax_correct(
    fn: Callable, x: torch.Tensor, *, masked_rows: str = "declared", caps: Capabilities | None = None
) -> engine.CaseOutcome:
    """Check ``fn`` on one input against the oracle and the contract; AssertionError says what broke."""
    out = engine.check_softmax_input(_as_target(fn, "softmax", caps, None), x, masked_rows=masked_rows,
                                     compare_naive=False)
    return _raise_evaluation(out, f"softmax of {tuple(x.shape)} {x.dtype}")


def assert_attention_correct(
    fn: Callable, inputs, *, masked_rows: str = "declared", caps: Capabilities | None = None
) -> engine.CaseOutcome:
    """``inputs`` is a ``strategies.AttentionInputs`` (or anything with q, k, v, scale, causal, mask)."""
    t = _as_target(fn, "attention", caps, None)
    out = engine.check_attention_input(t, inputs.q, inputs.k, inputs.v, scale=inputs.scale, causal=inputs.causal,
                                       mask=inputs.mask, masked_rows=masked_rows, compare_naive=False)
    return _raise_evaluation(out, f"attention of q {tuple(inputs.q.shape)} {inputs.q.dtype}")
