"""The target registry: every implementation the suite can check, with what it supports.

A target is a callable with the suite's contract (``verify.contracts``), a name,
the op it computes, declared ``Capabilities`` and a probe saying whether it can
run here (a GPU backend on a CPU machine cannot).  The suite only generates
inputs inside a target's capabilities; unsupported cells are reported as such.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from verify.capabilities import Capabilities

OPS = ("softmax", "attention")


@dataclass(frozen=True)
class Target:
    name: str
    op: str  # "softmax" | "attention"
    fn: Callable
    caps: Capabilities
    description: str
    #: returns None when the target can run on ``device``, else the reason it cannot
    probe: Callable[[str], str | None] = field(default=lambda device: None)
    kind: str = "reference"  # reference | torch | triton | user | mutant

    def unavailable_reason(self, device: str) -> str | None:
        if not self.caps.supports_device(device):
            return f"{self.name} does not run on {device} (declared devices: {', '.join(self.caps.devices)})"
        return self.probe(device)


_REGISTRY: dict[str, Target] = {}
_LOADED = False


def register(target: Target) -> Target:
    if target.op not in OPS:
        raise ValueError(f"unknown op {target.op!r}; ops are {OPS}")
    _REGISTRY[target.name] = target
    return target


def _load_builtins() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from kernels import builtin_targets, mutants, peer_targets  # noqa: F401  (register on import)

    try:
        import triton  # noqa: F401
    except ImportError:  # the Triton kernels are an optional extra
        return
    from kernels import triton_attention_mutants, triton_mutants, triton_targets  # noqa: F401


def all_targets(op: str | None = None) -> list[Target]:
    _load_builtins()
    return [t for t in _REGISTRY.values() if op is None or t.op == op]


def get_target(name: str) -> Target:
    _load_builtins()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"no registered target named {name!r}; registered: {known}")
    return _REGISTRY[name]
