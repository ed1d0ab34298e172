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

from collections.abc import Callable, Sequence

import torch

from kernels.registry import Target
from verify import artifacts, engine, search
from verify.capabilities import Capabilities


def _as_target(fn: Callable, op: str, caps: Capabilities | None, name: str | None) -> Target:
    caps = caps or getattr(fn, "flashverify_capabilities", None) or Capabilities()
    return Target(name or getattr(fn, "__qualname__", repr(fn)), op, fn, caps, "user callable", kind="user")


def _raise_if_violated(cells: list[search.CellResult]) -> None:
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
            lines.append(f"  replay: {artifacts.replay_command(c.artifact)}")
    raise AssertionError("\n".join(lines))


def _options(dtypes, device, max_examples, seed, masked_rows, artifact_dir) -> search.CheckOptions:
    return search.CheckOptions(
        dtypes=tuple(dtypes) if dtypes else None, device=device, max_examples=max_examples, seed=seed,
        masked_rows=masked_rows, artifact_dir=artifact_dir,
        profile=search.PROFILES["gpu" if device.startswith("cuda") else "cpu"],
    )


def check_softmax(
    fn: Callable[[torch.Tensor], torch.Tensor], *, dtypes: Sequence[str] | None = None, device: str = "cpu",
    max_examples: int = 100, seed: int | None = None, masked_rows: str = "either",
    caps: Capabilities | None = None, name: str | None = None,
    artifact_dir: str = str(artifacts.DEFAULT_DIR),
) -> list[search.CellResult]:
    """Search for inputs on which ``fn`` is not a correct softmax over the last dim; raise if found."""
    cells = search.check_target(_as_target(fn, "softmax", caps, name),
                                _options(dtypes, device, max_examples, seed, masked_rows, artifact_dir))
    _raise_if_violated(cells)
    return cells


def check_attention(
    fn: Callable[..., torch.Tensor], *, dtypes: Sequence[str] | None = None, device: str = "cpu",
    max_examples: int = 100, seed: int | None = None, masked_rows: str = "either",
    caps: Capabilities | None = None, name: str | None = None,
    artifact_dir: str = str(artifacts.DEFAULT_DIR),
) -> list[search.CellResult]:
    """Search for inputs on which ``fn(q, k, v, *, scale, causal, mask)`` is wrong; raise if found."""
    cells = search.check_target(_as_target(fn, "attention", caps, name),
                                _options(dtypes, device, max_examples, seed, masked_rows, artifact_dir))
    _raise_if_violated(cells)
    return cells


def _raise_evaluation(out: engine.CaseOutcome, what: str) -> engine.CaseOutcome:
    if out.evaluation.violations:
        raise AssertionError(f"{what}: " + "; ".join(v.one_line() for v in out.evaluation.violations))
    return out


def assert_softmax_correct(
    fn: Callable, x: torch.Tensor, *, masked_rows: str = "either", caps: Capabilities | None = None
) -> engine.CaseOutcome:
    """Check ``fn`` on one input against the oracle and the contract; AssertionError says what broke."""
    out = engine.check_softmax_input(_as_target(fn, "softmax", caps, None), x, masked_rows=masked_rows,
                                     compare_naive=False)
    return _raise_evaluation(out, f"softmax of {tuple(x.shape)} {x.dtype}")


def assert_attention_correct(
    fn: Callable, inputs, *, masked_rows: str = "either", caps: Capabilities | None = None
) -> engine.CaseOutcome:
    """``inputs`` is a ``strategies.AttentionInputs`` (or anything with q, k, v, scale, causal, mask)."""
    t = _as_target(fn, "attention", caps, None)
    out = engine.check_attention_input(t, inputs.q, inputs.k, inputs.v, scale=inputs.scale, causal=inputs.causal,
                                       mask=inputs.mask, masked_rows=masked_rows, compare_naive=False)
    return _raise_evaluation(out, f"attention of q {tuple(inputs.q.shape)} {inputs.q.dtype}")
