"""Softmax targets that break the process running them, for the cell-worker tests.

A CUDA fault cannot be produced on the CPU machine, so ``lose_context`` simulates one:
importing this module (the worker does, through ``verify.loader``) makes the engine
believe its inputs are on CUDA and that the context no longer works, exactly the
state a sticky CUDA error leaves.  Only the worker process that loads this file is
affected, and it ends after the simulated loss, as it would after a real one.
"""

from __future__ import annotations

import os
import time

import torch

from verify import engine


def exit_hard(x: torch.Tensor) -> torch.Tensor:
    """Dies like a segfaulting kernel: no exception, no cleanup, the process is gone."""
    if x.shape[-1] >= 3:
        os._exit(7)
    return torch.softmax(x.float(), -1).to(x.dtype)


def raise_cuda_error(x: torch.Tensor) -> torch.Tensor:
    """Raises the message torch gives for a misaligned access, on rows of 5 or more."""
    if x.shape[-1] >= 5:
        raise RuntimeError("CUDA error: misaligned address\nCUDA kernel errors might be asynchronously reported")
    return torch.softmax(x.float(), -1).to(x.dtype)


def lose_context(x: torch.Tensor) -> torch.Tensor:
    """``raise_cuda_error``, after putting this process's engine in the state a sticky CUDA error leaves."""
    if x.shape[-1] >= 5:
        engine._uses_cuda = lambda values: True
        engine._wait_for_device = lambda: None
        engine.device_context_alive = lambda: False
    return raise_cuda_error(x)


def sleep_forever(x: torch.Tensor) -> torch.Tensor:
    """Never returns in any useful time (a deadlocked kernel)."""
    time.sleep(3600)
    return x


def slow_and_wrong(x: torch.Tensor) -> torch.Tensor:
    """Slow (0.03 s a call) and wrong (all zeros) for rows of 2 or more elements: a violation
    found at once whose shrink takes a few hundred examples."""
    time.sleep(0.03)
    y = torch.softmax(x.float(), -1).to(x.dtype)
    return torch.zeros_like(y) if x.shape[-1] >= 2 else y


_CALLS = {"n": 0}


def slow_first_call(x: torch.Tensor) -> torch.Tensor:
    """Right, and slow once: the first call in a process sleeps 1.5 s (a GPU kernel's compile)."""
    _CALLS["n"] += 1
    if _CALLS["n"] == 1:
        time.sleep(1.5)
    return torch.softmax(x.float(), -1).to(x.dtype)


def stall_the_oracle(x: torch.Tensor) -> torch.Tensor:
    """Right, but on rows of 3 or more it makes this process's oracle hang (the suite stuck
    after the target returned, as a lock wait or a runaway fallback would leave it)."""
    if x.shape[-1] >= 3:
        from verify import oracle

        def stuck(*args, **kwargs):
            time.sleep(3600)

        oracle.softmax_truth = stuck
    return torch.softmax(x.float(), -1).to(x.dtype)
