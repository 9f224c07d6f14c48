"""One flat array per model on the wire (``fast`` protocol timing only).

Flower sends every array of an ``ArrayRecord`` as its own objects (an ``Array`` and its
chunk), and every object is its own request through the SuperLink, three hops each way.
The testbed's CNN (8 tensors) is 20 objects a message; one flat array makes it 5, which
more than halves a fast round's protocol time on 2 cores
(docs/history/benchmarks-journal.md, fourth lean pass). In ``fast`` mode the ServerApp's
grid packs the model of every message it pushes (:func:`pack_grid`) and unpacks every
reply, and the ClientApp does the reverse (:func:`unpack`, :func:`pack`), so strategies,
checkpoints, telemetry and the TT uplink
see the usual per-layer ``ArrayRecord``. ``flower`` mode sends Flower's message content
unchanged. Only a record of float32 arrays is packed (anything else, e.g. a TT-encoded
update, travels as it is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict

if TYPE_CHECKING:
    from flwr.serverapp import Grid

FLAT = "testbed.flat"  # the one key of a packed record
ARRAYS = "arrays"  # the record of a message that holds the model
Layout = list[tuple[str, tuple[int, ...]]]  # key -> shape, float32 throughout


def layout(record: ArrayRecord) -> Layout | None:
    """Keys and shapes of ``record``, or None when it cannot be packed (not all float32)."""
    arrays = {k: v.numpy() for k, v in record.items()}
    if not arrays or any(a.dtype != np.float32 for a in arrays.values()):
        return None
    return [(k, tuple(a.shape)) for k, a in arrays.items()]


def pack(record: ArrayRecord) -> ArrayRecord:
    """``record`` as one flat float32 array under :data:`FLAT` (unchanged if not packable)."""
    if layout(record) is None:
        return record
    flat = np.concatenate([v.numpy().reshape(-1) for v in record.values()])
    return ArrayRecord({FLAT: Array(flat)})


def is_packed(record: ArrayRecord) -> bool:
    """True for a record made by :func:`pack`."""
    return list(record.keys()) == [FLAT]


def unpack(record: ArrayRecord, model_layout: Layout) -> ArrayRecord:
    """The per-layer record of a packed ``record`` (others returned unchanged).

    ``model_layout``: the model's keys and shapes (:func:`shapes` of its state); ValueError
    when the flat array's size does not match them.
    """
    if not is_packed(record):
        return record
    flat = record[FLAT].numpy()
    sizes = [int(np.prod(s)) for _k, s in model_layout]
    if flat.size != sum(sizes):
        raise ValueError(f"packed model has {flat.size} values, the model {sum(sizes)}")
    parts = np.split(flat, np.cumsum(sizes)[:-1])
    pairs = zip(model_layout, parts, strict=True)
    return ArrayRecord({k: Array(np.ascontiguousarray(p.reshape(s))) for (k, s), p in pairs})


def shapes(state: Mapping[str, Any]) -> Layout:
    """Keys and shapes of a model's ``state_dict()`` (what :func:`unpack` needs)."""
    return [(k, tuple(v.shape)) for k, v in state.items()]


def set_arrays(msg: Message, arrays: ArrayRecord) -> None:
    """Give ``msg`` a content whose model record is ``arrays`` (other records kept)."""
    content = RecordDict({k: v for k, v in msg.content.items() if k != ARRAYS})
    content[ARRAYS] = arrays
    msg.content = content


def pack_grid(grid: Grid, model_layout: Layout) -> None:
    """Make ``grid`` push every message's model packed and unpack every reply's.

    ``send_and_receive`` calls ``self.push_messages`` and ``self.pull_messages``, so
    instance attributes are enough (as for
    :func:`nodes.fl.server_app.tolerate_superlink_restarts`). Messages are changed in
    place, so whoever holds them sees the ids Flower sets on push.
    """
    push, pull = grid.push_messages, grid.pull_messages

    def push_messages(messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        for m in messages:
            if m.has_content() and ARRAYS in m.content.array_records:
                set_arrays(m, pack(m.content.array_records[ARRAYS]))
        return push(messages)

    def pull_messages(message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(pull(message_ids))
        for m in replies:
            if m.has_content() and ARRAYS in m.content.array_records:
                set_arrays(m, unpack(m.content.array_records[ARRAYS], model_layout))
        return replies

    grid.push_messages = push_messages  # type: ignore[method-assign]
    grid.pull_messages = pull_messages  # type: ignore[method-assign]
