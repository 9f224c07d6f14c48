"""kernel/registry.Registry: names, dotted-path user hooks, lazy built-ins, errors."""

from __future__ import annotations

import sys

import pytest

from kernel.registry import Registry, import_dotted, is_dotted_path

FORTY_TWO = "tests.fl.custom_hooks:NOT_A_STRATEGY"


def _int(obj: object) -> int:
    if not isinstance(obj, int):
        raise TypeError(f"must be an int, got {obj!r}")
    return obj


def test_register_names_and_lookup() -> None:
    reg: Registry[int] = Registry("number")
    reg.register("two")(2)
    reg.register("one")(1)
    assert reg.names() == ["one", "two"] and list(reg) == ["one", "two"] and len(reg) == 2
    assert reg["two"] == 2 and "one" in reg and "three" not in reg
    choices = r"choose one of \['one', 'two'\]$"
    with pytest.raises(ValueError, match=rf"unknown number 'three'; {choices}"):
        reg.check("three")


def test_dotted_paths_need_a_validator() -> None:
    reg: Registry[object] = Registry("thing")
    with pytest.raises(ValueError, match="unknown thing 'json:loads'"):
        reg.check("json:loads")


def test_user_hook_by_dotted_path_is_imported_and_validated() -> None:
    reg: Registry[int] = Registry("number", validate=_int)
    assert reg.check(FORTY_TWO) == FORTY_TWO
    assert reg[FORTY_TWO] == 42
    with pytest.raises(ValueError, match=r"number 'json:loads': must be an int"):
        reg.check("json:loads")
    with pytest.raises(ValueError, match="cannot import module 'no_such_pkg.mod'"):
        reg.check("no_such_pkg.mod:X")
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        reg["json:Nope"]
    msg = "or 'package.module:Attribute'"
    with pytest.raises(ValueError, match=msg):
        reg.check("plainname")


def test_builtin_by_path_is_imported_on_first_use_only() -> None:
    sys.modules.pop("tests.fl.custom_hooks", None)
    reg: Registry[int] = Registry("number", validate=_int)
    reg.add_path("answer", FORTY_TWO)
    assert reg.names() == ["answer"] and reg.check("answer") == "answer"
    assert "tests.fl.custom_hooks" not in sys.modules
    assert reg["answer"] == 42
    assert "tests.fl.custom_hooks" in sys.modules
    with pytest.raises(ValueError, match="is not 'package.module:Attr'"):
        reg.add_path("bad", "no-colon")


def test_dotted_path_syntax() -> None:
    assert is_dotted_path("a.b:C") and is_dotted_path("a:C.D")
    assert not is_dotted_path("fedavg") and not is_dotted_path("a.b:") and not is_dotted_path(":C")
    assert import_dotted("os.path:join") is __import__("os").path.join


def test_strategy_spec_accepts_a_user_class_and_checks_its_parameters() -> None:
    from nodes.fl.config import StrategySpec
    from nodes.fl.strategies import STRATEGIES

    spec = StrategySpec(name="tests.fl.custom_hooks:ScaledFedAvg", params={"server_lr": 0.5})
    assert STRATEGIES[spec.name].__name__ == "ScaledFedAvg"
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['lr_server'\]"):
        StrategySpec(name="tests.fl.custom_hooks:ScaledFedAvg", params={"lr_server": 0.5})
    with pytest.raises(ValueError, match="must be a subclass of flwr.serverapp.strategy.Strategy"):
        StrategySpec(name="tests.fl.custom_hooks:first_node")
    with pytest.raises(ValueError, match=r"choose one of \['bulyan', 'diloco', 'fedadagrad'"):
        StrategySpec(name="fedsgd")


def test_placement_policy_by_dotted_path_runs() -> None:
    from testbed.functions.config import FunctionsSpec
    from testbed.functions.placement import POLICIES, Cost, Job, Site, place
    from testbed.spec.catalog import DeviceProfile

    # (other test modules may have registered policies of their own: tests/test_extensions.py)
    assert {"static-cpu", "static-gpu", "gaia", "gaia-link"} <= set(POLICIES.names())
    name = "tests.fl.custom_hooks:first_node"
    sites = [
        Site("b", "fog", DeviceProfile(cpu_speed_factor=1.0), 1.0, None),
        Site("a", "edge", DeviceProfile(cpu_speed_factor=2.0), 1.0, None),
    ]
    job = Job("f", "cpu", 100.0, Cost(wall_s=0.01, cpu_s=0.01, request_bytes=1, response_bytes=1))
    assert place(name, [job], sites, 10.0)["f"].node == "b"
    with pytest.raises(ValueError, match="policy"):
        FunctionsSpec.model_validate({"policy": "nope", "functions": []})


def test_radio_task_by_dotted_path_validates() -> None:
    from radio.config import SemanticMuxSpec
    from radio.task_registry import TASK_BUILDERS

    assert len(TASK_BUILDERS.names()) == 12
    with pytest.raises(ValueError, match=rf"tasks: radio task '{FORTY_TWO}'"):
        SemanticMuxSpec(tasks=("digit", FORTY_TWO))


def test_partitioner_by_dotted_path_splits_the_data() -> None:
    import numpy as np

    from nodes.fl import task
    from nodes.fl.config import FLSpec

    spec = FLSpec.model_validate({"partitioner": {"name": "tests.fl.custom_hooks:label_blocks"}})
    splits = task.get_splits(spec, 0, 5)
    first, last = splits.silo_train[0].y, splits.silo_train[-1].y
    assert np.max(first) < np.min(last)  # label blocks: silo 1 holds the low digits only
    with pytest.raises(ValueError, match=r"partitioner '.*NOT_A_STRATEGY': must be a callable"):
        FLSpec.model_validate({"partitioner": {"name": FORTY_TWO}})


def test_builtins_package_is_imported_on_first_lookup_only(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry with ``builtins=`` finds every module of the package, lazily: building
    the registry imports none of them; the first names()/lookup imports all, once."""
    pkg = tmp_path / "shapes_pkg"  # type: ignore[operator]
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from kernel.registry import Registry\n"
                                     "SHAPES = Registry('shape', builtins='shapes_pkg')\n")
    for name, sides in (("triangle", 3), ("square", 4)):
        (pkg / f"{name}.py").write_text(
            f"from shapes_pkg import SHAPES\nSHAPES.register({name!r})({sides})\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    import shapes_pkg  # type: ignore[import-not-found]

    reg = shapes_pkg.SHAPES
    assert "shapes_pkg.square" not in sys.modules  # nothing imported yet
    assert reg.names() == ["square", "triangle"] and reg["triangle"] == 3
    assert "shapes_pkg.square" in sys.modules
    with pytest.raises(ValueError, match=r"unknown shape 'circle'; choose one of"):
        reg.check("circle")
    for name in [m for m in sys.modules if m.startswith("shapes_pkg")]:
        del sys.modules[name]


def test_a_lookup_from_another_thread_waits_for_the_builtins(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workloads of one run look themselves up from their own threads in a fresh
    process: the second lookup, made while the first thread is still importing the
    built-ins, waits for them instead of finding only those imported so far
    ("unknown workload 'fl'; choose one of ['compress']")."""
    import threading
    import time

    pkg = tmp_path / "slow_pkg"  # type: ignore[operator]
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from kernel.registry import Registry\nTHINGS = Registry('thing', builtins='slow_pkg')\n"
    )
    (pkg / "a_fast.py").write_text("from slow_pkg import THINGS\nTHINGS.register('fast')(1)\n")
    (pkg / "b_slow.py").write_text(
        "import time\nfrom slow_pkg import THINGS\ntime.sleep(1.0)\nTHINGS.register('slow')(2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import slow_pkg  # type: ignore[import-not-found]

    reg = slow_pkg.THINGS
    first = threading.Thread(target=lambda: reg["fast"])
    first.start()
    time.sleep(0.3)  # the first thread is in b_slow's import
    try:
        assert reg["slow"] == 2
    finally:
        first.join()
        for name in [m for m in sys.modules if m.startswith("slow_pkg")]:
            del sys.modules[name]
