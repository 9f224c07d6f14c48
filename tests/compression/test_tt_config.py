"""CompressSpec validation: defaults valid, errors name their field."""

import pytest
from pydantic import ValidationError

from nodes.compression.config import CompressSpec


def test_defaults_valid_and_frozen():
    s = CompressSpec()
    assert s.resolved_model() == "digits_cnn" and s.dataset == "digits"
    with pytest.raises(ValidationError):
        s.quick = True  # frozen
    assert hash(s) == hash(CompressSpec())
    o = CompressSpec(engine_overrides={"engine_power_w": 0.6, "baseline_power_w": 0.5})
    assert dict(o.engine_overrides) == {"engine_power_w": 0.6, "baseline_power_w": 0.5}
    assert CompressSpec(**o.model_dump()) == o  # dump -> load round trip


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"eps_list": [0.1, 1.5]}, "eps_list"),
        ({"eps_list": []}, "eps_list"),
        ({"max_rank": 0}, "max_rank"),
        ({"svd_backend": "cusolver"}, "svd_backend"),
        ({"model": "not a model"}, "model"),
        ({"engine_profile": "tpu"}, "engine_profile"),
        ({"engine_overrides": {"warp_speed": 2.0}}, "engine_overrides"),
        ({"engine_overrides": {"engine_power_w": -1.0}}, "engine_overrides"),
        ({"dataset": "cifar10"}, "cifar10_path"),
        ({"model": "resnet32"}, "resnet32"),
        ({"bogus_key_s": 3}, "bogus_key_s"),
        ({"test_fraction": 1.0}, "test_fraction"),
    ],
)
def test_errors_name_the_field(kwargs, field):
    with pytest.raises(ValidationError) as info:
        CompressSpec(**kwargs)
    assert field in str(info.value)


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, nodes.compression.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
