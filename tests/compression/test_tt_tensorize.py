"""Tensorization shapes and TT layers in real models."""

import pytest
import torch
from torch import nn

from nodes.compression.layers import TTConv2d, TTLinear, compress_module
from nodes.compression.resnet import resnet32
from nodes.compression.tensorize import balanced_factors, conv_plan, linear_plan, plan_for


def test_conv_plan_is_cin_kh_kw_cout():
    p = conv_plan((64, 32, 3, 3))
    assert p.tensor_shape == (32, 3, 3, 64)
    w = torch.randn(64, 32, 3, 3)
    t = p.to_tensor(w)
    assert torch.equal(t[5, 1, 2, 7], w[7, 5, 1, 2])
    assert torch.equal(p.from_tensor(t), w)
    assert conv_plan((16, 1, 3, 3)).tensor_shape == (3, 3, 16)
    assert conv_plan((32, 16, 1, 1)).tensor_shape == (16, 32)


def test_linear_plan_balanced_modes():
    p = linear_plan((10, 64))
    assert (p.out_modes, p.in_modes, p.tensor_shape) == ((5, 2), (8, 8), (40, 16))
    p = linear_plan((128, 256))
    assert (p.out_modes, p.in_modes) == ((8, 4, 4), (8, 8, 4))
    w = torch.randn(128, 256)
    assert torch.equal(p.from_tensor(p.to_tensor(w)), w)
    assert linear_plan((7, 64)).kind == "matrix"  # 7 is prime: no TT-matrix
    assert balanced_factors(360, 3) == (10, 6, 6)  # greedy, largest primes first
    assert balanced_factors(13, 2) == (13, 1)
    assert plan_for((4, 5, 6)).tensor_shape == (4, 30)
    with pytest.raises(ValueError, match="1-D"):
        plan_for((5,))


def test_resnet32_size():
    m = resnet32()
    n = sum(p.numel() for p in m.parameters())
    assert 0.45e6 < n < 0.47e6
    weights = [mod for mod in m.modules() if isinstance(mod, nn.Conv2d | nn.Linear)]
    assert len(weights) == 32
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16 * 4 * 4, 32)
        self.small = nn.Linear(32, 2)

    def forward(self, x):
        return self.small(self.head(self.body(x).flatten(1)))


def test_compress_any_module_matches_reconstruction():
    torch.manual_seed(0)
    model = Tiny()
    res = compress_module(model, eps=0.6, min_numel=1000)
    names = {lr.name for lr in res.layers}
    assert names == {"body.0", "head"}  # small is below min_numel
    assert isinstance(res.model.body[0], TTConv2d) and isinstance(res.model.head, TTLinear)
    assert isinstance(model.head, nn.Linear)  # original untouched
    for lr in res.layers:
        assert lr.rel_error <= 0.6 + 1e-6 and lr.tt_params < lr.dense_params
    x = torch.randn(3, 8, 4, 4)
    dense = Tiny()
    dense.load_state_dict(model.state_dict())
    with torch.no_grad():
        dense.body[0].weight.copy_(res.model.body[0].weight_tt())
        dense.head.weight.copy_(res.model.head.weight_tt())
        assert torch.allclose(res.model(x), dense(x), atol=1e-5)
    assert res.params_after < res.params_before and res.ratio > 1.0
    out = res.model(x).sum()
    out.backward()
    assert res.model.head.weight_tt.cores[0].grad is not None  # cores are trainable
