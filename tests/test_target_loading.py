"""Loading a user's target, and recording it so that its counterexamples replay.

* a module that exits (``sys.exit``, argparse) or raises a non-``Exception`` on import is a
  ``TargetLoadError`` that says so, not a silent exit of the suite;
* a callable that cannot take the engine's call (``fn(x)`` / ``fn(q, k, v, *, scale, causal,
  mask)``) is a ``TargetLoadError`` naming the expected signature, not a kernel violation;
  every registered target and mutant fits the call, and uninspectable builtins are accepted;
* a file target is recorded by its absolute path, so replay works from any directory;
* the Python API records ``module:qualname`` (or the test file's path), so its printed replay
  command loads the function, and says so when a lambda or closure cannot be loaded;
* both entry points (``python -m verify``, the ``flashverify`` script) set up the Triton
  interpreter before the CLI is imported.

All in-process and fast: no subprocesses, no searches.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap
import tomllib
import types
from pathlib import Path

import pytest
import torch

import verify.__main__ as verify_main
from kernels.mutants import all_mutants
from kernels.registry import all_targets
from kernels.reference import naive_attention
from verify import _environment, api, artifacts, engine, search
from verify.contracts import Violation
from verify.loader import EXPECTED_SIGNATURES, TargetLoadError, call_shape_error, load_target

ROOT = Path(__file__).resolve().parent.parent


def _write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def _user_modules() -> set[str]:
    return {n for n in sys.modules if n.startswith("flashverify_user_")}


# --- 1. a module that exits or raises a BaseException on import ---------------------------------


@pytest.mark.parametrize("body, code", [
    ("import sys\nsys.exit(3)\n", "3"),
    ("import argparse\nargparse.ArgumentParser().parse_args(['--no-such-flag'])\n", "2"),
    ("raise SystemExit\n", "None"),
])
def test_a_file_that_exits_on_import_is_a_load_error(tmp_path: Path, body: str, code: str, capsys) -> None:
    path = _write(tmp_path / "exit_on_import.py", "def f(x):\n    return x\n" + body)
    before = _user_modules()
    with pytest.raises(TargetLoadError) as e:
        load_target(f"{path}:f", "softmax")
    message = str(e.value)
    assert "exited on import" in message and f"exit code {code}" in message
    assert 'if __name__ == "__main__":' in message
    assert _user_modules() == before  # the half-imported module is not left behind


def test_a_module_that_exits_or_raises_a_base_exception_on_import_is_a_load_error(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    _write(tmp_path / "fv_exits_on_import.py", "import sys\nsys.exit('usage: mykernels.py N')\n")
    _write(tmp_path / "fv_base_exception_on_import.py", """
        class Abort(BaseException):
            pass
        raise Abort("stop here")
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TargetLoadError, match="exited on import .*'usage: mykernels.py N'.*__main__"):
        load_target("fv_exits_on_import:f", "softmax")
    with pytest.raises(TargetLoadError, match="raised Abort on import: stop here"):
        load_target("fv_base_exception_on_import:f", "softmax")
    assert "fv_exits_on_import" not in sys.modules


def test_keyboard_interrupt_on_import_still_interrupts(tmp_path: Path) -> None:
    path = _write(tmp_path / "interrupted.py", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_target(f"{path}:f", "softmax")


# --- 2. the callable must take the engine's call ------------------------------------------------

KERNELS = """
    import torch

    def two_args(a, b):
        return a
    def no_args():
        return None
    def softmax(x):
        return torch.softmax(x, -1)
    def attention(q, k, v, *, scale, causal, mask):
        return q
    def softmax_with_options(x, dim=-1, *, out_dtype=None):
        return torch.softmax(x, dim)
    def attention_with_defaults(q, k, v, *, scale, causal=False, mask=None, return_lse=False):
        return q
    def anything(*args, **kwargs):
        return args[0]
    def needs_more(x, *, block):
        return x
"""


@pytest.mark.parametrize("func, op, hint", [
    ("two_args", "softmax", None),
    ("no_args", "softmax", None),
    ("needs_more", "softmax", None),
    ("attention", "softmax", "--op attention"),
    ("softmax", "attention", "--op softmax"),
    ("no_args", "attention", None),
])
def test_a_callable_with_the_wrong_signature_is_a_load_error(tmp_path: Path, func: str, op: str,
                                                             hint: str | None) -> None:
    path = _write(tmp_path / "kernels_for_signatures.py", KERNELS)
    with pytest.raises(TargetLoadError) as e:
        load_target(f"{path}:{func}", op)
    message = str(e.value)
    article = "an" if op == "attention" else "a"
    assert f"cannot be checked as {article} {op} target" in message and EXPECTED_SIGNATURES[op] in message
    assert (hint in message) if hint else ("did you mean" not in message)


@pytest.mark.parametrize("func, op", [
    ("softmax", "softmax"), ("softmax_with_options", "softmax"), ("anything", "softmax"),
    ("attention", "attention"), ("attention_with_defaults", "attention"), ("anything", "attention"),
])
def test_callables_that_take_the_call_load(tmp_path: Path, func: str, op: str) -> None:
    path = _write(tmp_path / "kernels_for_signatures.py", KERNELS)
    assert load_target(f"{path}:{func}", op).op == op


def test_uninspectable_builtins_are_accepted() -> None:
    with pytest.raises((TypeError, ValueError)):
        inspect.signature(torch.softmax)
    assert call_shape_error(torch.softmax, "softmax") is None
    assert load_target("torch:softmax", "softmax").fn is torch.softmax
    assert load_target("torch.softmax", "softmax").name == "torch.softmax"  # the registered target
    assert load_target("torch.nn.functional:softmax", "softmax").kind == "user"


def test_the_check_binds_exactly_the_call_the_engine_makes() -> None:
    """Record every call the engine makes of a target and check each against the bound shape:
    if the engine's call changes, ``call_shape_error`` must change with it."""
    calls: list[tuple[int, tuple[str, ...]]] = []

    def softmax_recorder(*args, **kwargs):
        calls.append((len(args), tuple(sorted(kwargs))))
        return torch.softmax(args[0].double(), -1).to(args[0].dtype)

    def attention_recorder(*args, **kwargs):
        calls.append((len(args), tuple(sorted(kwargs))))
        return naive_attention(*args, **kwargs)

    soft = api._as_target(softmax_recorder, "softmax", None, None)
    assert engine.check_softmax_input(soft, torch.randn(2, 5), compare_naive=False).evaluation.ok
    assert calls and set(calls) == {(1, ())}
    calls.clear()
    att = api._as_target(attention_recorder, "attention", None, None)
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    out = engine.check_attention_input(att, q, k, v, scale=0.5, causal=True, mask=None, compare_naive=False)
    assert out.evaluation.ok
    assert calls and set(calls) == {(3, ("causal", "mask", "scale"))}

    def softmax_exact(x):
        return x

    def attention_exact(q, k, v, *, scale, causal, mask):
        return q

    assert call_shape_error(softmax_exact, "softmax") is None
    assert call_shape_error(attention_exact, "attention") is None


def test_every_registered_target_and_mutant_takes_the_call() -> None:
    targets = all_targets()
    assert {t.op for t in targets} == {"softmax", "attention"}
    assert {t.name: call_shape_error(t.fn, t.op) for t in targets if call_shape_error(t.fn, t.op)} == {}
    mutants, controls = all_mutants()
    assert {m.name: call_shape_error(m.fn, m.op) for m in mutants + controls if call_shape_error(m.fn, m.op)} == {}
    for t in targets:  # and every one loads by name for its op
        assert load_target(t.name, t.op) is t


# --- 3. file targets are recorded by absolute path ----------------------------------------------


def test_a_file_target_is_recorded_by_its_absolute_path_and_replays_from_anywhere(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    _write(work / "sub" / "mykernel.py", "import torch\ndef sm(x):\n    return torch.softmax(x, -1)\n")
    elsewhere.mkdir()
    monkeypatch.chdir(work)
    target = load_target("sub/mykernel.py:sm", "softmax")
    assert target.name == f"{(work / 'sub' / 'mykernel.py').resolve()}:sm"
    assert target.description == "user callable sub/mykernel.py:sm"  # as the user wrote it
    art = artifacts.Artifact(op="softmax", target=target.name, dtype="float32", device="cpu",
                             inputs={"x": torch.zeros(2, 3)}, spec=None, description="2x3 zeros", options={},
                             violation=None)
    saved = artifacts.save(art, tmp_path / "cex")
    assert saved.name.startswith("mykernel.py_sm-softmax-float32-")  # short and readable
    monkeypatch.chdir(elsewhere)
    again = artifacts.load(saved)
    assert again.target == target.name
    reloaded = load_target(again.target, again.op)
    assert reloaded.name == target.name and reloaded.fn(torch.zeros(1, 2)).tolist() == [[0.5, 0.5]]


def test_short_target_name_leaves_other_names_alone() -> None:
    assert artifacts.short_target_name("/a/b/k.py:f") == "k.py:f"
    assert artifacts.short_target_name("mypkg.kernels:attn") == "mypkg.kernels:attn"
    assert artifacts.short_target_name("softmax-tail-pad-zero") == "softmax-tail-pad-zero"


# --- 4. the Python API records an importable name -----------------------------------------------


def bad_softmax(x: torch.Tensor) -> torch.Tensor:
    """A top-level function of this test module: wrong everywhere."""
    return torch.zeros_like(x)


def test_importable_spec_names_module_functions_test_files_and_main(monkeypatch) -> None:
    assert api.importable_spec(naive_attention) == ("kernels.reference:naive_attention", "")
    spec, _ = api.importable_spec(bad_softmax)  # a test module: by file, it is not on a plain sys.path
    assert spec == f"{Path(__file__).resolve()}:bad_softmax"
    main = types.ModuleType("__main__")
    main.__file__ = str(ROOT / "myscript.py")
    exec("def kernel(x):\n    return x\n", main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert api.importable_spec(main.kernel) == (f"{ROOT / 'myscript.py'}:kernel", "")
    closure_spec, why = api.importable_spec(lambda x: x)
    assert closure_spec is None and "lambda or is defined inside a function" in why


def _fake_search(saved: list[artifacts.Artifact], tmp_path: Path):
    def check_target(target, opts, **kw):
        art = artifacts.Artifact(op=target.op, target=target.name, dtype="float32", device="cpu",
                                 inputs={"x": torch.ones(1, 2)}, spec=None, description="1x2 ones", options={},
                                 violation=None)
        saved.append(art)
        return [search.CellResult(target.name, target.op, "float32", "cpu", status="violated",
                                  violation=Violation("accuracy", "wrong"), counterexample="1x2 ones",
                                  artifact=str(artifacts.save(art, tmp_path)))]
    return check_target


def test_check_softmax_prints_a_replay_command_that_loads_the_function(tmp_path: Path, monkeypatch) -> None:
    saved: list[artifacts.Artifact] = []
    monkeypatch.setattr(search, "check_target", _fake_search(saved, tmp_path))
    with pytest.raises(AssertionError) as e:
        api.check_softmax(bad_softmax, artifact_dir=str(tmp_path))
    assert "replay: python -m verify replay " in str(e.value)
    reloaded = load_target(saved[0].target, "softmax")  # what `verify replay` does with the artifact
    assert reloaded.fn.__qualname__ == "bad_softmax" and reloaded.fn(torch.ones(2)).tolist() == [0.0, 0.0]


def test_check_attention_of_a_closure_says_there_is_no_replay_command(tmp_path: Path, monkeypatch) -> None:
    saved: list[artifacts.Artifact] = []
    monkeypatch.setattr(search, "check_target", _fake_search(saved, tmp_path))

    def my_attention(q, k, v, *, scale, causal, mask):
        return q

    with pytest.raises(AssertionError) as e:
        api.check_attention(my_attention, artifact_dir=str(tmp_path))
    message = str(e.value)
    assert "replay: python -m verify replay" not in message
    assert "replay: no command" in message and "defined inside a function" in message
    assert "name='MODULE:FUNC'" in message and str(tmp_path) in message  # where the evidence is
    with pytest.raises(AssertionError) as named:  # a name the user gives is trusted
        api.check_attention(my_attention, name="mypkg.kernels:my_attention", artifact_dir=str(tmp_path))
    assert "replay: python -m verify replay " in str(named.value)
    assert saved[-1].target == "mypkg.kernels:my_attention"


# --- 5. both entry points prepare the Triton interpreter ----------------------------------------


def test_prepare_selects_the_interpreter_without_cuda_and_keeps_a_users_choice(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _environment.prepare()
    assert "TRITON_INTERPRET" not in os.environ
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _environment.prepare()
    assert os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    _environment.prepare()
    assert os.environ["TRITON_INTERPRET"] == "0"


def test_the_console_script_prepares_before_importing_the_cli(monkeypatch) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module_name, _, func = scripts["flashverify"].partition(":")
    assert (module_name, func) == ("verify.__main__", "run")
    order: list[str] = []
    monkeypatch.setattr(_environment, "prepare", lambda: order.append("prepare"))
    import verify.cli

    monkeypatch.setattr(verify.cli, "main", lambda argv=None: order.append(f"main {argv}") or 0)
    assert getattr(verify_main, func)(["targets"]) == 0
    assert order == ["prepare", "main ['targets']"]


def test_nothing_before_prepare_imports_triton_or_the_cli() -> None:
    """verify/__init__.py, verify/__main__.py and verify/_environment.py import, at their top
    level, nothing that could reach triton before ``prepare()`` runs."""
    allowed = {"__future__", "os", "sys", "typing", "warnings", "verify", "verify._environment"}
    for name in ("__init__.py", "__main__.py", "_environment.py"):
        tree = ast.parse((ROOT / "verify" / name).read_text())
        for node in tree.body:
            if isinstance(node, ast.Import):
                assert {a.name for a in node.names} <= allowed, (name, ast.dump(node))
            elif isinstance(node, ast.ImportFrom):
                assert node.module in allowed, (name, node.module)
