"""One flat array per model on the wire in ``fast`` mode (nodes/fl/packing.py, issue 15).

The federation runs the registry's FedAvg against the testbed's real ClientApp in
process (``tests/fl/federation.py``), once as Flower sends it and once with the grid
packing the model: same global models, 5 objects a message instead of 20.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest
from federation import LoopbackGrid
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp.strategy import Strategy
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from nodes.fl import packing, task
from nodes.fl.config import FLSpec
from nodes.fl.strategies import STRATEGIES, constructor_args

SPEC = FLSpec.model_validate({"local_epochs": 1, "rounds": 2})
EXACT = 1e-6  # float32 models, the same arithmetic per element either way


def _model_record() -> ArrayRecord:
    splits = task.get_splits(SPEC, 3, 3)
    return ArrayRecord(task.make_model(SPEC, splits).state_dict())


def test_pack_and_unpack_round_trip_with_fewer_objects() -> None:
    record = _model_record()
    layout = packing.layout(record)
    assert layout is not None and len(layout) == len(record) == 8
    packed = packing.pack(record)
    assert packing.is_packed(packed) and not packing.is_packed(record)
    back = packing.unpack(packed, layout)
    assert list(back) == list(record)
    for k in record:
        assert np.array_equal(back[k].numpy(), record[k].numpy()), k

    def objects(r: ArrayRecord) -> int:
        return len(get_all_nested_objects(RecordDict({"arrays": r, "c": ConfigRecord()})))

    assert (objects(record), objects(packed)) == (19, 5)  # 8 chunks + 8 arrays vs 1 + 1


def test_only_float32_records_are_packed() -> None:
    mixed = ArrayRecord({"w": Array(np.ones(3, np.float32)), "n": Array(np.ones(1, np.int64))})
    assert packing.layout(mixed) is None and packing.pack(mixed) is mixed
    assert packing.unpack(mixed, [("w", (3,))]) is mixed  # not packed: unchanged
    packed = packing.pack(ArrayRecord({"w": Array(np.ones((2, 3), np.float32))}))
    with pytest.raises(ValueError, match="packed model has 6 values, the model 4"):
        packing.unpack(packed, [("w", (2, 2))])


def _federation(pack: bool) -> tuple[LoopbackGrid, list[dict[str, np.ndarray]], list[bool]]:
    """Globals per round, and whether each message's model left the grid packed."""
    import torch

    torch.manual_seed(3)
    initial = _model_record()
    grid = LoopbackGrid(SPEC, 3, 3)
    push, left_packed = grid.push_messages, []

    def record(messages: Iterable[Message]) -> Iterable[str]:  # the wire, as it were
        messages = list(messages)
        left_packed.extend(packing.is_packed(m.content.array_records["arrays"]) for m in messages)
        return push(messages)

    grid.push_messages = record  # type: ignore[method-assign]
    layout = packing.layout(initial)
    if pack and layout is not None:
        packing.pack_grid(grid, layout)
    globals_: list[dict[str, np.ndarray]] = []
    args = constructor_args("fedavg", {}, SPEC.model_dump(), 3)
    strategy: Strategy = STRATEGIES["fedavg"](**args)
    strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=SPEC.rounds,
        train_config=ConfigRecord({"lr": SPEC.lr}),
        evaluate_fn=lambda _r, a: globals_.append({k: v.numpy().copy() for k, v in a.items()}),
    )
    return grid, globals_, left_packed


def test_packed_federation_trains_exactly_as_flower_sends_it() -> None:
    plain_grid, plain, plain_packed = _federation(pack=False)
    packed_grid, packed, packed_packed = _federation(pack=True)
    assert len(plain) == len(packed) == SPEC.rounds + 1
    for a, b in zip(plain, packed, strict=True):
        assert a.keys() == b.keys()
        assert all(np.allclose(a[k], b[k], atol=EXACT, rtol=0) for k in a)
    assert not np.allclose(plain[0]["0.weight"], plain[-1]["0.weight"])  # it trained
    # train and evaluate messages: the model as one array each way, only when packing
    assert len(packed_packed) == 12 and all(packed_packed) and not any(plain_packed)
    trained = [r.weights for r in packed_grid.replies if r.weights]
    assert len(trained) == 6 and all(list(w) == [packing.FLAT] for w in trained)
    assert all(packing.FLAT not in r.weights for r in plain_grid.replies)
