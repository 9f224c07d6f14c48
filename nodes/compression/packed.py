"""An encoded update as few arrays: one blob per dtype plus a small index.

Every array of a Flower ``ArrayRecord`` is serialized as a ``.npy`` buffer with a 128-byte
header, so a TT-encoded update of a small model (per TT tensor 5 metadata arrays + its
cores, plus the raw tensors: 22 arrays for the 2-conv CNN) pays ~2.8 kB of headers per
reply, 10-20 % of its payload. :func:`pack` concatenates the arrays of each dtype into one
flat blob and writes what is where into an index; :func:`unpack` restores the dict
exactly. Keys::

    "@packed/index"    uint8, UTF-8 JSON: [[dtype, ...], [[key, blob, *shape], ...]]
                       (blob: position in the dtype list; entries in order, each
                       following the previous one of its blob)
    "@packed/<dtype>"  1-D blob, e.g. "@packed/<f4", "@packed/<i8"

Positions count elements, not bytes, so a blob may be cast on the wire (float32 ->
float16) and back without touching the index; :func:`unpack` returns each array in its
blob's dtype. The index costs ~25-35 bytes per array, a quarter of a header.
"""

from __future__ import annotations

import json

import numpy as np

PREFIX = "@packed/"
INDEX = f"{PREFIX}index"


def is_packed(encoded: dict[str, np.ndarray]) -> bool:
    """Whether ``encoded`` is the output of :func:`pack`."""
    return INDEX in encoded


def pack(encoded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Concatenate the arrays of ``encoded`` per dtype (see module docstring).

    Parameters
    ----------
    encoded : dict[str, numpy.ndarray]
        Any dict of arrays (e.g. :func:`nodes.compression.codec.encode_update`'s output).

    Returns
    -------
    dict[str, numpy.ndarray]
        ``"@packed/index"`` and one 1-D blob per dtype.
    """
    parts: dict[str, list[np.ndarray]] = {}
    entries: list[list[object]] = []
    for key, arr in encoded.items():
        arr = np.asarray(arr)
        blob = parts.setdefault(arr.dtype.str, [])
        blob.append(arr.reshape(-1))
        entries.append([key, list(parts).index(arr.dtype.str), *arr.shape])
    text = json.dumps([list(parts), entries], separators=(",", ":")).encode("utf-8")
    out = {INDEX: np.frombuffer(text, dtype=np.uint8)}
    out.update({f"{PREFIX}{dt}": np.concatenate(arrs) for dt, arrs in parts.items()})
    return out


def unpack(packed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inverse of :func:`pack`: the original keys (in order) and shapes.

    Raises
    ------
    ValueError
        No index, or an index entry that points outside its blob.
    """
    if INDEX not in packed:
        raise ValueError(f"a packed update needs the {INDEX!r} array")
    dtypes, entries = json.loads(bytes(np.asarray(packed[INDEX], dtype=np.uint8)).decode())
    blobs = [np.asarray(packed.get(f"{PREFIX}{dt}", np.zeros(0))) for dt in dtypes]
    offsets = [0] * len(blobs)
    out: dict[str, np.ndarray] = {}
    for key, blob, *shape in entries:
        size = int(np.prod(shape, dtype=np.int64))
        start, offsets[blob] = offsets[blob], offsets[blob] + size
        if offsets[blob] > blobs[blob].size:
            raise ValueError(f"packed entry {key!r} lies outside blob {dtypes[blob]!r}")
        out[key] = blobs[blob][start : start + size].reshape(shape)
    return out
