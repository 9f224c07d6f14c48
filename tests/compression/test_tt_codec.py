"""FL uplink codec round trips."""

import numpy as np
import pytest

from nodes.compression.codec import decode_update, encode_update, encoded_nbytes


def state(seed=0):
    rng = np.random.default_rng(seed)
    low = (rng.standard_normal((64, 4)) @ rng.standard_normal((4, 288))).reshape(64, 32, 3, 3)
    return {
        "conv.weight": (low + 0.01 * rng.standard_normal(low.shape)).astype(np.float32),
        "fc.weight": rng.standard_normal((128, 256)).astype(np.float32),
        "fc.bias": rng.standard_normal(128).astype(np.float32),
        "bn.num_batches_tracked": np.array(7, dtype=np.int64),
        "odd@name": rng.standard_normal((40, 50)).astype(np.float64),
        "tiny": rng.standard_normal((3, 3)).astype(np.float32),
    }


@pytest.mark.parametrize("eps", [0.05, 0.3])
def test_round_trip_within_eps(eps):
    arrays = state()
    enc = encode_update(arrays, eps=eps, max_rank=None, min_numel=256)
    assert all(isinstance(v, np.ndarray) for v in enc.values())
    dec = decode_update(enc)
    assert list(dec) == list(arrays)
    compressed = {k.rpartition("@")[0] for k in enc if "@tt/" in k}
    assert "conv.weight" in compressed
    for k, a in arrays.items():
        assert dec[k].shape == a.shape and dec[k].dtype == a.dtype
        if k in compressed:
            err = np.linalg.norm(dec[k] - a) / np.linalg.norm(a)
            assert err <= eps * (1 + 1e-4), (k, err)
        else:
            assert np.array_equal(dec[k], a)
    for k in ("fc.bias", "bn.num_batches_tracked", "tiny"):
        assert f"{k}@raw" in enc
    assert encoded_nbytes(enc) < sum(a.nbytes for a in arrays.values())


def test_low_rank_conv_shrinks_a_lot():
    arrays = {"w": state()["conv.weight"]}
    enc = encode_update(arrays, eps=0.05, min_numel=16)
    assert encoded_nbytes(enc) * 3 < arrays["w"].nbytes


def test_max_rank_and_errors():
    arrays = state()
    enc = encode_update(arrays, eps=0.01, max_rank=2, min_numel=256)
    for k, v in enc.items():
        if "@tt/core" in k:
            assert v.shape[0] <= 2 and v.shape[2] <= 2
    with pytest.raises(ValueError, match="eps"):
        encode_update(arrays, eps=0.0)
    with pytest.raises(ValueError, match="suffix"):
        decode_update({"plain": np.zeros(2)})
    broken = {k: v for k, v in enc.items() if not k.endswith("@tt/perm")}
    with pytest.raises(ValueError, match="lacks"):
        decode_update(broken)


def test_fits_a_flower_array_record():
    pytest.importorskip("flwr")
    from flwr.app import Array, ArrayRecord

    arrays = state()
    enc = encode_update(arrays, eps=0.3, min_numel=256)
    record = ArrayRecord({k: Array(v) for k, v in enc.items()})
    dec = decode_update({k: v.numpy() for k, v in record.items()})
    assert {k: (v.shape, v.dtype) for k, v in dec.items()} == {
        k: (v.shape, v.dtype) for k, v in arrays.items()}
    assert np.array_equal(dec["fc.bias"], arrays["fc.bias"])


def gradient_like(seed=0, rank=3):
    """A linear layer's update: a sum of a few outer products (low matrix rank), plus noise."""
    rng = np.random.default_rng(seed)
    low = rng.standard_normal((64, rank)) @ rng.standard_normal((rank, 512))
    return (low + 0.01 * rng.standard_normal(low.shape)).astype(np.float32)


def test_matrix_tensorization_keeps_a_gradients_low_rank():
    arrays = {"fc.weight": gradient_like()}
    tt = encode_update(arrays, eps=0.1, min_numel=16, tensorization="tt")
    mat = encode_update(arrays, eps=0.1, min_numel=16, tensorization="matrix")
    # the matrix is a TT of order 2 of shape (64, 512) with rank 3: 3 * (64 + 512) entries
    assert [v.shape for k, v in mat.items() if "@tt/core" in k] == [(1, 64, 3), (3, 512, 1)]
    # the TT-matrix modes scatter the low matrix rank: far more entries at the same eps
    assert encoded_nbytes(mat) * 4 < encoded_nbytes(tt)
    for enc in (tt, mat):
        dec = decode_update(enc)["fc.weight"]
        err = np.linalg.norm(dec - arrays["fc.weight"]) / np.linalg.norm(arrays["fc.weight"])
        assert err <= 0.1 * (1 + 1e-4)


def test_auto_tensorization_keeps_the_smaller_per_array():
    rng = np.random.default_rng(1)
    # a conv kernel with TT ranks 2 in (Cin, kh, kw, Cout): 120 entries, 352 as a matrix
    g = [rng.standard_normal(s) for s in [(16, 2), (2, 3, 2), (2, 3, 2), (2, 32)]]
    conv = np.einsum("ia,ajb,bkc,co->oijk", *g).astype(np.float32)
    arrays = {"conv": conv, "fc": gradient_like(), "bias": np.ones(64, np.float32)}
    auto = encode_update(arrays, eps=0.05, min_numel=16, tensorization="auto")
    for key in ("conv", "fc"):
        one = {key: arrays[key]}
        sizes = [encoded_nbytes(encode_update(one, eps=0.05, min_numel=16, tensorization=t))
                 for t in ("tt", "matrix")]
        got = encoded_nbytes({k: v for k, v in auto.items() if k.startswith(f"{key}@")})
        assert got == min(sizes), (key, got, sizes)
    assert len(auto["conv@tt/tensor"]) == 4 and len(auto["fc@tt/tensor"]) == 2
    assert "bias@raw" in auto
    dec = decode_update(auto)
    assert np.array_equal(dec["bias"], arrays["bias"])
    for key in ("conv", "fc"):
        err = np.linalg.norm(dec[key] - arrays[key]) / np.linalg.norm(arrays[key])
        assert err <= 0.05 * (1 + 1e-4)


def test_tensorization_is_validated():
    with pytest.raises(ValueError, match="tensorization"):
        encode_update(state(), eps=0.3, tensorization="cp")
