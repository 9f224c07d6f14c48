"""Gaia's Execution Mode Identifier: one function file per rule, plus edge cases inline."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from nodes.functions.identifier import (
    LARGE_TENSOR_ELEMENTS,
    MODES,
    IdentifierError,
    ModeDecision,
    identify_file,
    identify_source,
)

FUNCTIONS = Path(__file__).resolve().parents[1] / "data" / "functions"


def _deciding(decision: ModeDecision) -> str:
    """The first reason: the one that decided the mode."""
    assert decision.reasons, "a decision always has reasons"
    return decision.reasons[0]


# file, expected mode, line of the deciding finding, fragments the deciding reason must contain
CASES = [
    ("framework.py", "cpu_preferred", 3, ["imports torch", "(framework)"]),
    ("large_tensor.py", "gpu_preferred", 8, ["torch.randn", "4096 elements", "large tensor"]),
    ("cuda_call.py", "gpu", 8, ["layer.cuda()", ".cuda() call"]),
    ("to_cuda.py", "gpu", 8, ["batch.to('cuda:0')", ".to(cuda)"]),
    ("device_cuda.py", "gpu", 5, ["torch.device('cuda')", "cuda device"]),
    ("device_kw.py", "gpu", 8, ["torch.zeros", "device='cuda'", "device=cuda keyword"]),
    ("alias.py", "gpu_preferred", 7, ["T.randn (torch.randn)", "4096 elements", "large tensor"]),
    ("from_import.py", "gpu_preferred", 7, ["randn (torch.randn)", "1600 elements"]),
    ("nested_list.py", "gpu_preferred", 5, ["torch.tensor", "1040 elements", "large tensor"]),
    ("jax_fn.py", "gpu_preferred", 7, ["jnp.ones (jax.numpy.ones)", "16384 elements"]),
    ("small_tensor.py", "cpu_preferred", 3, ["imports torch", "(framework)"]),
    ("name_shape.py", "cpu_preferred", 3, ["imports torch", "(framework)"]),
]


@pytest.mark.parametrize(("name", "mode", "line", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_function_files(name: str, mode: str, line: int, fragments: list[str]) -> None:
    decision = identify_file(FUNCTIONS / name)
    assert decision.mode == mode, decision.reasons
    reason = _deciding(decision)
    assert reason.startswith(f"line {line}: "), reason
    assert reason.endswith(f"-> {mode}"), reason
    for fragment in fragments:
        assert fragment in reason, (fragment, reason)


def test_plain_function_is_cpu() -> None:
    decision = identify_file(FUNCTIONS / "plain.py")
    assert decision.mode == "cpu"
    assert decision.reasons == (
        "no framework import (torch, tensorflow, cupy, jax) and no GPU use -> cpu",
    )


def test_exactly_threshold_is_small_not_large() -> None:
    decision = identify_file(FUNCTIONS / "small_tensor.py")
    assert decision.mode == "cpu_preferred"
    assert "line 7: torch.zeros creates 1000 elements (small tensor, <= 1000 elements)" in (
        " ".join(decision.reasons)
    )
    assert not any("gpu" in r for r in decision.reasons), decision.reasons


def test_name_shape_is_not_counted_and_says_so() -> None:
    decision = identify_file(FUNCTIONS / "name_shape.py")
    assert decision.mode == "cpu_preferred"
    note = "line 8: torch.randn shape is not given by integer literals (n, n), size not counted"
    assert note in decision.reasons
    assert decision.reasons[-1] == note  # notes come after the ranked findings


def test_gpu_file_also_lists_weaker_findings() -> None:
    decision = identify_file(FUNCTIONS / "device_kw.py")
    assert decision.reasons[1:] == (
        "line 3: imports torch (framework) -> cpu_preferred",
        "line 7: torch.ones creates 8 elements (small tensor, <= 1000 elements) -> cpu_preferred",
        "line 8: torch.zeros creates 8 elements (small tensor, <= 1000 elements) -> cpu_preferred",
    )


def test_syntax_error_names_file_and_line() -> None:
    path = FUNCTIONS / "syntax_error.py.txt"
    with pytest.raises(IdentifierError) as info:
        identify_file(path)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value)
    assert "line 5" in str(info.value)
    assert info.value.lineno == 5
    assert info.value.filename == str(path)


def test_syntax_error_in_source_uses_given_filename() -> None:
    with pytest.raises(IdentifierError, match=r"^fn\.py, line 2: "):
        identify_source("import torch\ndef handler(request:\n", filename="fn.py")
    with pytest.raises(IdentifierError, match=r"^<function>, line 1: "):
        identify_source("x = = 1\n")


def test_undecodable_file_is_an_identifier_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(b"import torch\nname = '\xe9'\n")
    with pytest.raises(IdentifierError, match=r"latin\.py, line 2: cannot decode"):
        identify_file(path)


def _mode(source: str) -> str:
    return identify_source(source).mode


@pytest.mark.parametrize(
    ("shape", "mode"),
    [
        ("torch.zeros(1000)", "cpu_preferred"),
        ("torch.zeros(1001)", "gpu_preferred"),
        ("torch.ones((10, 100))", "cpu_preferred"),
        ("torch.ones([10, 101])", "gpu_preferred"),
        ("torch.empty(size=(50, 50))", "gpu_preferred"),
        ("torch.rand(size=10)", "cpu_preferred"),
        ("torch.full((10, 100), 7.0)", "cpu_preferred"),
        ("torch.full((2, 2), 5000)", "cpu_preferred"),  # the fill value is not a dimension
        ("torch.full((10, 101), 7.0)", "gpu_preferred"),
        ("torch.tensor([1.0, -2.0, 3.0])", "cpu_preferred"),
        ("torch.tensor(data=[[0.5] * 3] * 1000)", "cpu_preferred"),  # not a literal
        ("torch.randn(40, n)", "cpu_preferred"),  # one non-literal dimension spoils the shape
        ("torch.randn(2 ** 12)", "cpu_preferred"),  # expressions are not literals
        ("torch.randn(True, 5000)", "cpu_preferred"),  # a bool is not a dimension
        ("torch.zeros(*dims)", "cpu_preferred"),
        ("torch.nn.functional.relu(torch.zeros(64, 64))", "gpu_preferred"),
        ("torch.zeros_like(x)", "cpu_preferred"),
    ],
)
def test_tensor_sizes(shape: str, mode: str) -> None:
    assert _mode(f"import torch\nn = 3\ny = {shape}\n") == mode


def test_tensor_threshold_constant() -> None:
    assert LARGE_TENSOR_ELEMENTS == 1000
    assert MODES == ("cpu", "cpu_preferred", "gpu_preferred", "gpu")


@pytest.mark.parametrize(
    ("source", "mode"),
    [
        ("import tensorflow as tf\ntf.zeros([64, 64])\n", "gpu_preferred"),
        ("import tensorflow as tf\ntf.zeros([10, 10])\n", "cpu_preferred"),
        ("from tensorflow import keras\nkeras.Sequential()\n", "cpu_preferred"),
        ("import cupy as cp\ncp.random.rand(40, 40)\n", "gpu_preferred"),
        ("import cupy\ncupy.array([[1, 2], [3, 4]])\n", "cpu_preferred"),
        ("import jax.numpy as jnp\njnp.zeros(5000, jnp.float32)\n", "gpu_preferred"),
        ("import jax.numpy as jnp\njnp.zeros(500, jnp.float32)\n", "cpu_preferred"),
        ("from jax import numpy as jnp\njnp.empty(shape=(40, 40))\n", "gpu_preferred"),
        ("import torch.nn\ntorch.zeros(64, 64)\n", "gpu_preferred"),
        ("import torch.nn as nn\nnn.Linear(4, 2)\n", "cpu_preferred"),
        ("def handler(r):\n    import torch\n    return torch.ones(50, 50)\n", "gpu_preferred"),
    ],
)
def test_frameworks_and_import_forms(source: str, mode: str) -> None:
    assert _mode(source) == mode


@pytest.mark.parametrize(
    "source",
    [
        "import numpy as np\nx = np.zeros((100, 100))\n",  # numpy is not a tensor framework
        "import torchaudio_like\n",  # a name that merely starts with a framework's
        "from . import torch\ntorch.randn(64, 64)\n",  # relative import: a local module
        "from .torch import randn\nrandn(64, 64)\n",  # a local package named like one
        "x = torch.randn(64, 64)\n",  # torch never imported: nothing resolves to it
        "def randn(*a):\n    return a\n\nrandn(64, 64)\n",
    ],
)
def test_not_frameworks_are_cpu(source: str) -> None:
    decision = identify_source(source)
    assert decision.mode == "cpu", decision.reasons


@pytest.mark.parametrize(
    ("source", "line", "fragment"),
    [
        ("import torch\nx = torch.ones(3)\nx = x.to('cuda')\n", 3, "x.to('cuda') (.to(cuda))"),
        ("import torch\nm = torch.nn.Linear(2, 2)\nm.to(device='cuda:1')\n", 3, ".to(cuda)"),
        ("import torch\ndev = torch.device(type='cuda')\n", 2, "type='cuda'"),
        ("from torch import device\nd = device('cuda:1')\n", 2, "device('cuda:1') (cuda device)"),
        ("import torch\n\nnet = torch.nn.Linear(2, 2).cuda(0)\n", 3, ".cuda() call"),
        ("import torch\ny = torch.randn(2, device='cuda')\n", 2, "device=cuda keyword"),
        ("def handler(r):\n    return r['model'].cuda()\n", 2, ".cuda() call"),  # no import
    ],
)
def test_gpu_rules(source: str, line: int, fragment: str) -> None:
    decision = identify_source(source)
    assert decision.mode == "gpu", decision.reasons
    reason = _deciding(decision)
    assert reason.startswith(f"line {line}: ") and reason.endswith("-> gpu"), reason
    assert fragment in reason, reason


@pytest.mark.parametrize(
    "call",
    [
        "x.to('cpu')",
        "torch.device('cpu')",
        "torch.device('cuda' if torch.cuda.is_available() else 'cpu')",  # run-time choice
        "x.to(dev)",
        "torch.zeros(4, device='cpu')",
        "torch.cuda.is_available()",
        "x.to('mps')",
    ],
)
def test_not_gpu(call: str) -> None:
    decision = identify_source(f"import torch\nx = torch.ones(2)\ndev = 'cpu'\ny = {call}\n")
    assert decision.mode == "cpu_preferred", decision.reasons


def test_precedence_gpu_over_large_tensor_over_import() -> None:
    source = "import torch\n\nbig = torch.randn(100, 100)\nsmall = torch.ones(4)\nbig.cuda()\n"
    decision = identify_source(source)
    assert decision.mode == "gpu"
    assert [r.rsplit(" -> ", 1)[1] for r in decision.reasons] == [
        "gpu",
        "gpu_preferred",
        "cpu_preferred",
        "cpu_preferred",
    ]
    assert decision.reasons[0].startswith("line 5: big.cuda()")
    assert decision.reasons[1].startswith("line 3: torch.randn creates 10000 elements")
    assert decision.reasons[2] == "line 1: imports torch (framework) -> cpu_preferred"
    assert decision.reasons[3].startswith("line 4: torch.ones creates 4 elements")


def test_long_call_text_is_shortened_in_reasons() -> None:
    dim = "compute_the_dimension(request['rows'], request['columns'], 4)"
    decision = identify_source(f"import torch\ny = torch.randn({dim})\n")
    assert decision.mode == "cpu_preferred"
    (note,) = [r for r in decision.reasons if "not counted" in r]
    shown = dim[:45] + "..."
    assert (
        note
        == f"line 2: torch.randn shape is not given by integer literals ({shown}), size not counted"
    )


def test_decision_to_dict_is_json_ready() -> None:
    decision = identify_file(FUNCTIONS / "large_tensor.py")
    data = decision.to_dict()
    assert set(data) == {"mode", "reasons"}
    assert data["mode"] == "gpu_preferred"
    assert data["reasons"] == list(decision.reasons)
    assert json.loads(json.dumps(data)) == data


def test_decision_rejects_unknown_mode_and_is_frozen() -> None:
    with pytest.raises(ValueError, match="unknown execution mode"):
        ModeDecision("tpu", ())
    decision = ModeDecision("cpu", ["why"])  # type: ignore[arg-type]
    assert decision.reasons == ("why",)
    with pytest.raises(AttributeError):
        decision.mode = "gpu"  # type: ignore[misc]


def test_function_files_are_real_handlers() -> None:
    files = sorted(FUNCTIONS.glob("*.py"))
    assert {f.name for f in files} >= {c[0] for c in CASES} | {"plain.py"}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        handlers = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "handler"]
        assert len(handlers) == 1, path.name
        assert [a.arg for a in handlers[0].args.args] == ["request"], path.name
