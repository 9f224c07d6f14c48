"""The FL uplink's use of the codec (nodes/fl/task.py): update deltas, error feedback,
the ``tensorization`` option of ``workload.fl.uplink``."""

import numpy as np
import pytest

pytest.importorskip("flwr")
torch = pytest.importorskip("torch")

from flwr.app import ArrayRecord, RecordDict  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from nodes.fl import task  # noqa: E402
from nodes.fl.config import UplinkSpec  # noqa: E402


def model_pair(seed=0):
    """A linear model and the 'received global' ArrayRecord it moved away from."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.Linear(64, 10))
    glob = ArrayRecord(model.state_dict())
    with torch.no_grad():  # a gradient-like step: a rank-2 change of the big weight
        u, v = torch.randn(64, 2), torch.randn(2, 128)
        model[0].weight.add_(0.1 * u @ v + 1e-3 * torch.randn(64, 128))
        model[1].weight.add_(0.01)
    return model, glob


def delta_of(model, glob):
    return {k: v.numpy() - glob[k].numpy() for k, v in model.state_dict().items()}


def test_error_feedback_carries_exactly_what_was_dropped():
    model, glob = model_pair()
    up = UplinkSpec(compression="tt", eps=0.6, min_numel=256, tensorization="matrix")
    state = RecordDict()
    enc = task.encode_delta(model, glob, up, state)
    sent = task.decode_delta(enc, {k: v.numpy() for k, v in glob.items()})
    res = state.array_records["tt-residual"]
    for k, d in delta_of(model, glob).items():
        got = sent[k].numpy() - glob[k].numpy()
        np.testing.assert_allclose(got + res[k].numpy(), d, atol=1e-6)
    assert np.linalg.norm(res["0.weight"].numpy()) > 0  # eps 0.6 dropped something
    # next round: the same update again; the residual is added before encoding
    enc2 = task.encode_delta(model, glob, up, state)
    again = task.decode_delta(enc2, {k: v.numpy() for k, v in glob.items()})
    d = delta_of(model, glob)["0.weight"]
    two_rounds = (sent["0.weight"].numpy() + again["0.weight"].numpy()
                  - 2 * glob["0.weight"].numpy())
    # sent twice the update, minus only the second round's residual
    np.testing.assert_allclose(two_rounds + state.array_records["tt-residual"]["0.weight"].numpy(),
                               2 * d, atol=1e-5)


def test_tensorization_reaches_the_codec():
    model, glob = model_pair()
    sizes = {}
    for t in ("tt", "matrix", "auto"):
        up = UplinkSpec(compression="tt", eps=0.3, min_numel=256, error_feedback=False,
                        tensorization=t)
        enc = task.encode_delta(model, glob, up)
        sizes[t] = task.array_nbytes(enc)
        shape = [int(x) for x in enc["0.weight@tt/tensor"].numpy()]
        assert (shape == [64, 128]) == (t != "tt"), (t, shape)
    assert sizes["auto"] <= sizes["matrix"] < sizes["tt"]  # auto: the smaller per array


def test_uplink_tensorization_is_validated():
    assert UplinkSpec().tensorization == "tt"  # default: behaviour unchanged
    with pytest.raises(ValidationError, match="tensorization"):
        UplinkSpec(tensorization="cp")


def test_packed_uplink_sends_fewer_bytes_and_decodes_the_same():
    model, glob = model_pair()
    base = {k: v.numpy() for k, v in glob.items()}
    out = {}
    for flag in (False, True):
        up = UplinkSpec(compression="tt", eps=0.3, min_numel=256, packed=flag,
                        tensorization="auto", wire_dtype="float16")
        state = RecordDict()
        enc = task.encode_delta(model, glob, up, state)
        out[flag] = (task.array_nbytes(enc), len(enc), task.decode_delta(enc, base),
                     state.array_records["tt-residual"])
    assert out[True][1] < out[False][1] and out[True][0] < out[False][0]
    for k in base:
        np.testing.assert_array_equal(out[True][2][k].numpy(), out[False][2][k].numpy())
        np.testing.assert_array_equal(out[True][3][k].numpy(), out[False][3][k].numpy())
