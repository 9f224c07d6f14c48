"""The packed wire form of an encoded update (nodes/compression/packed.py)."""

import numpy as np
import pytest

from nodes.compression import packed
from nodes.compression.codec import decode_update, encode_update


def state():
    """A mixed dict: float32 matrices and a bias, a float64 array, an int64 counter."""
    rng = np.random.default_rng(3)
    u, v = rng.standard_normal((48, 2)), rng.standard_normal((2, 96))
    return {
        "fc.weight": (u @ v + 0.01 * rng.standard_normal((48, 96))).astype(np.float32),
        "fc.bias": rng.standard_normal(48).astype(np.float32),
        "conv.weight": rng.standard_normal((8, 4, 3, 3)).astype(np.float64),
        "steps": np.array(7, dtype=np.int64),
    }


def gradient_like():
    return state()["fc.weight"]


def test_pack_round_trip_is_exact_for_every_dtype_and_shape():
    arrays = state() | {"scalar": np.array(3.5, dtype=np.float32), "empty": np.zeros((0, 4))}
    p = packed.pack(arrays)
    # one blob per dtype (f4, i8, f8) plus the index
    assert sorted(p) == ["@packed/<f4", "@packed/<f8", "@packed/<i8", "@packed/index"]
    back = packed.unpack(p)
    assert list(back) == list(arrays)
    for k, a in arrays.items():
        assert back[k].shape == a.shape and back[k].dtype == a.dtype
        assert np.array_equal(back[k], a), k


def test_decode_reads_the_packed_form_and_a_widened_blob():
    arrays = {"fc.weight": gradient_like(), "fc.bias": np.arange(64, dtype=np.float32)}
    enc = encode_update(arrays, eps=0.2, min_numel=256, tensorization="matrix")
    plain = decode_update(enc)
    p = packed.pack(enc)
    assert packed.is_packed(p) and not packed.is_packed(enc)
    for k, v in decode_update(p).items():
        assert np.array_equal(v, plain[k]), k
    # float16 on the wire, widened back to float32 before decoding: offsets still hold
    half = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in p.items()}
    wide = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in half.items()}
    got = decode_update(wide)
    assert np.array_equal(got["fc.bias"], arrays["fc.bias"])  # small ints: exact in float16
    err = np.linalg.norm(got["fc.weight"] - plain["fc.weight"]) / np.linalg.norm(plain["fc.weight"])
    assert 0 < err < 1e-3


def test_packed_record_is_smaller_on_the_wire():
    pytest.importorskip("flwr")
    from flwr.app import Array, ArrayRecord

    arrays = state()
    enc = encode_update(arrays, eps=0.3, min_numel=256)

    def wire(d):  # serialized buffer bytes, as the ServerApp records bytes_received
        return sum(len(a.data) for a in ArrayRecord({k: Array(v) for k, v in d.items()}).values())

    p = packed.pack(enc)
    assert len(p) == 5 < len(enc)  # index + f4, f8 (cores, raw), i8 (plans), u1 (dtype names)
    # each dropped array saved its 128-byte .npy header; the JSON index costs far less
    assert p["@packed/index"].nbytes < 40 * len(enc)
    assert wire(enc) - wire(p) >= 128 * (len(enc) - len(p)) - p["@packed/index"].nbytes > 0
    record = ArrayRecord({k: Array(v) for k, v in p.items()})
    back = decode_update({k: v.numpy() for k, v in record.items()})
    assert all(np.array_equal(back[k], v) for k, v in decode_update(enc).items())


def test_unpack_errors_name_the_problem():
    with pytest.raises(ValueError, match="index"):
        packed.unpack({"@packed/<f4": np.zeros(3, np.float32)})
    p = packed.pack({"w": np.zeros(5, np.float32)})
    p["@packed/<f4"] = p["@packed/<f4"][:3]
    with pytest.raises(ValueError, match="outside"):
        packed.unpack(p)
