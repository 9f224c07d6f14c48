"""SemanticMuxSpec: defaults, the YAML file, and errors that name the field."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from pydantic import ValidationError

from radio.config import DIGITS_TASKS, SemanticMuxSpec
from radio.scheme_registry import BUILTIN_SCHEMES


def test_defaults_and_yaml(root):
    spec = SemanticMuxSpec()
    assert spec.carrier_frequency_hz == 28e9
    assert spec.num_tasks_list == (2, 4, 8)
    assert spec.tasks == DIGITS_TASKS
    doc = yaml.safe_load((root / "experiments" / "semantic_mux.yaml").read_text())
    assert set(doc) == {"name", "seed", "workload"}
    from_yaml = SemanticMuxSpec(**doc["workload"]["semantic_mux"])
    # the YAML spells out every key; its values are the defaults except the seed sweep
    assert set(doc["workload"]["semantic_mux"]) == set(SemanticMuxSpec.model_fields)
    assert spec.seeds is None and from_yaml.seeds == (0, 1, 2)
    assert from_yaml.model_dump(exclude={"seeds"}) == spec.model_dump(exclude={"seeds"})
    assert spec.schemes == BUILTIN_SCHEMES and spec.schemes[0] == "semantic_mux"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"subcarrier_spacing_hz": 100e3}, "subcarrier_spacing_hz"),
        ({"carrier_frequency_hz": 200e9}, "carrier_frequency_hz"),
        ({"tasks": ["digit", "colour"]}, "tasks"),
        ({"num_tasks_list": [2, 9]}, "num_tasks_list"),
        ({"tasks": ["digit", "cifar10"], "num_tasks_list": [2]}, "cifar10_dir"),
        ({"tasks": ["digit", "text_sentiment"], "num_tasks_list": [2]}, "text_csv_path"),
        ({"snr_db_list": [100.0]}, "snr_db_list"),
        ({"train_snr_min_db": 30.0}, "train_snr_min_db"),
        ({"channel_model": "rayleigh"}, "channel_model"),
        ({"bit_baseline": {"qam_bits_per_symbol": 3}}, "qam_bits_per_symbol"),
        ({"energy": {"radio_power_w": -1}}, "radio_power_w"),
        ({"carrier_frequency": 28e9}, "carrier_frequency"),
        ({"seeds": [0, 0]}, "seeds"),
        ({"seeds": [-1]}, "seeds"),
        ({"seeds": []}, "seeds"),
        ({"seeds": list(range(21))}, "seeds"),
        ({"schemes": ["semantic_mux", "tdma"]}, "schemes"),
        ({"schemes": ["orthogonal", "bit_level"]}, "schemes"),
        ({"schemes": ["semantic_mux", "orthogonal", "semantic_mux"]}, "schemes"),
        ({"mux_channel_uses": 1, "num_tasks_list": [8]}, "mux_channel_uses"),
    ],
)
def test_errors_name_the_field(kwargs, field):
    with pytest.raises(ValidationError) as e:
        SemanticMuxSpec(**kwargs)
    assert field in str(e.value)


def test_frozen():
    spec = SemanticMuxSpec()
    with pytest.raises(ValidationError):
        spec.quick = True


def test_config_imports_nothing_heavy():
    code = (
        "import sys, radio.config; "
        "bad = [m for m in ('torch', 'sionna', 'numpy', 'sklearn') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_seeds_and_schemes_accepted():
    spec = SemanticMuxSpec(seeds=[3, 1, 2], schemes=["semantic_mux", "bit_level"])
    assert spec.seeds == (3, 1, 2) and spec.schemes == ("semantic_mux", "bit_level")
    # orthogonal_equal needs S*L >= K only when it is one of the schemes
    spec = SemanticMuxSpec(mux_channel_uses=1, num_tasks_list=[8],
                           schemes=["semantic_mux", "orthogonal"])
    assert spec.mux_channel_uses == 1
    # a user scheme by dotted path is imported and checked at load time
    user = "radio.schemes:BUILTIN.orthogonal"
    assert user in SemanticMuxSpec(schemes=["semantic_mux", user]).schemes
