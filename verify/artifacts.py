"""Counterexamples as files: saved once found, replayed bit for bit.

An artifact is one ``torch.save`` file holding the exact input tensors (with
their strides), the strategy's description of them, the target's name, the
options of the run and the violation seen.  ``python -m verify replay FILE``
re-runs the target on the same bits and exits 1 if it still violates.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FORMAT = "flashverify-artifact/1"
DEFAULT_DIR = Path(".flashverify") / "counterexamples"


class ArtifactError(Exception):
    """The file is missing, unreadable or not a flashverify artifact."""


@dataclass
class Artifact:
    op: str
    target: str
    dtype: str
    device: str
    inputs: dict[str, Any] | None  # softmax: {"x"}; attention: {"q","k","v","mask","scale","causal"}; None: the .json
    spec: dict[str, Any] | None
    description: str
    options: dict[str, Any]
    violation: dict[str, Any] | None
    kind: str = "violation"  # violation | worst-case

    def to_payload(self) -> dict[str, Any]:
        cpu = {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in self.inputs.items()}
        return {
            "format": FORMAT, "op": self.op, "target": self.target, "dtype": self.dtype, "device": self.device,
            "inputs": cpu, "spec": self.spec, "description": self.description, "options": self.options,
            "violation": self.violation, "kind": self.kind,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60]


def short_target_name(target: str) -> str:
    """``target`` for file names and headlines: a file target (``/abs/dir/file.py:func``, as the
    loader records it so that replay works from any directory) shortened to ``file.py:func``;
    any other name unchanged."""
    where, sep, attr = target.rpartition(":")
    if sep and where.endswith(".py"):
        return f"{Path(where).name}:{attr}"
    return target


def save(artifact: Artifact, directory: str | Path = DEFAULT_DIR) -> Path:
    """Write the artifact; the file name is derived from its content, so saving twice is harmless."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = artifact.to_payload()
    digest = hashlib.sha1(
        json.dumps([payload["spec"], payload["target"], payload["dtype"], payload["description"]],
                   sort_keys=True, default=str).encode()
    ).hexdigest()[:10]
    stem = f"{_slug(short_target_name(artifact.target))}-{artifact.op}-{artifact.dtype}-{artifact.kind}-{digest}"
    path = directory / f"{stem}.pt"
    torch.save(payload, path)
    (path.with_suffix(".json")).write_text(json.dumps(
        {k: v for k, v in payload.items() if k != "inputs"}, indent=2, default=str))
    return path


def load(path: str | Path) -> Artifact:
    """The artifact in ``path``: the ``.pt`` file, or the ``.json`` written beside it (no tensors:
    ``inputs`` is None and replay rebuilds them from the spec, as when a GPU run sent back only
    the JSON)."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"no such artifact file: {path}")
    if path.suffix == ".json":
        return _load_sidecar(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise ArtifactError(f"{path} is not a readable artifact ({type(e).__name__}: {e})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ArtifactError(f"{path} is not a flashverify artifact (expected format {FORMAT})")
    return Artifact(payload["op"], payload["target"], payload["dtype"], payload["device"], payload["inputs"],
                    payload.get("spec"), payload.get("description", ""), payload.get("options", {}),
                    payload.get("violation"), payload.get("kind", "violation"))


def _load_sidecar(path: Path) -> Artifact:
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path} is not a readable artifact description ({type(e).__name__}: {e})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ArtifactError(f"{path} is not a flashverify artifact description (expected format {FORMAT})")
    if not payload.get("spec"):
        raise ArtifactError(f"{path} holds no strategy spec to rebuild the inputs from (a hand-made input); "
                            f"replay needs the .pt file beside it")
    return Artifact(payload["op"], payload["target"], payload["dtype"], payload["device"], None,
                    payload["spec"], payload.get("description", ""), payload.get("options", {}),
                    payload.get("violation"), payload.get("kind", "violation"))


def replay_command(path: str | Path) -> str:
    return f"python -m verify replay {path}"


def _same_bits(a: Any, b: Any) -> bool:
    """Equal values bit for bit (NaN payloads and signed zeros included), or equal non-tensors."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        raw = [t.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for t in (a, b)]
        return bool(torch.equal(*raw))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return a == b


def replay_inputs(art: Artifact, device: str) -> tuple[dict[str, Any], str]:
    """The artifact's inputs on ``device``, and how they were obtained.

    Moving a saved view to a device keeps its values and strides but not its storage
    offset, so a "misaligned" input would arrive aligned and a bug that depends on the
    data pointer would not replay.  When the artifact carries its strategy spec, the
    case is rebuilt from it on the device (same layout, offset and poisoned gaps) and
    used if its bits equal the saved tensors; otherwise the saved tensors are moved.
    """
    from strategies.replay import case_from_dict
    from verify.search import case_inputs_on

    if art.inputs is None:  # the JSON description alone: the spec is all there is
        try:
            return (case_inputs_on(case_from_dict(art.spec), art.op, device),
                    "rebuilt from the spec (the .json alone: no saved tensors to compare the bits with)")
        except Exception as e:
            raise ArtifactError(f"the spec in the artifact description cannot be rebuilt "
                                f"({type(e).__name__}: {e}); replay needs the .pt file") from None
    saved = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in art.inputs.items()}
    if not art.spec:
        return saved, "saved tensors"

    try:
        rebuilt = case_inputs_on(case_from_dict(art.spec), art.op, device)
    except Exception:  # an old or hand-edited spec: the saved tensors are the evidence
        return saved, "saved tensors (the spec could not be rebuilt)"
    if set(rebuilt) == set(art.inputs) and all(_same_bits(rebuilt[k], art.inputs[k]) for k in art.inputs):
        return rebuilt, "rebuilt from the spec (same bits, original memory layout)"
    return saved, "saved tensors (the spec rebuilds different bits)"
