"""Bad ``workload.llm_pipeline`` input: a clear error with its YAML path and line."""

from __future__ import annotations

import pytest

from testbed.spec.errors import SpecError
from testbed.spec.loader import parse_spec

SPEC = """\
name: h
fleet:
  nodes:
    - {{id: edge, tier: edge, profile: {edge_profile}}}
    - {{id: cloud, tier: cloud}}
workload:
  llm_pipeline:
    model: {{n_layers: {layers}, d_model: 64, n_heads: 4, d_ff: 128, vocab: 64, max_seq: 64}}
    replicas:
      - [edge, {second}]
    requests: {{prompt_tokens: 8, new_tokens: 4}}
"""


def spec(**kw: object) -> str:
    args: dict[str, object] = {"edge_profile": "rpi5", "layers": 4, "second": "cloud"}
    return SPEC.format(**{**args, **kw})


def problems(text: str) -> list[tuple[str, int, str]]:
    with pytest.raises(SpecError) as e:
        parse_spec(text, "h.yaml")
    return [(p.path, p.line, p.message) for p in e.value.problems]


def test_valid_spec_parses() -> None:
    exp = parse_spec(spec(), "h.yaml")
    assert exp.workload.section == "llm_pipeline"


def test_unknown_node_names_its_path_and_line() -> None:
    [(path, line, msg)] = problems(spec(second="fog"))
    assert path == "workload.llm_pipeline.replicas.0.1" and line == 10
    assert "'fog' is not defined in fleet.nodes" in msg


def test_model_that_fits_no_cut_names_the_chain() -> None:
    tiny = "{cpu_speed_factor: 0.5, memory_mb: 1}"
    text = spec(edge_profile=tiny, layers=4).replace(
        "{id: cloud, tier: cloud}", f"{{id: cloud, tier: cloud, profile: {tiny}}}"
    )
    text = text.replace("d_model: 64", "d_model: 512").replace("d_ff: 128", "d_ff: 2048")
    [(path, line, msg)] = problems(text)
    assert path == "workload.llm_pipeline.replicas.0" and line == 10
    assert "does not fit the memory" in msg


def test_more_stages_than_layers() -> None:
    [(path, _line, msg)] = problems(spec(layers=1))
    assert path.startswith("workload.llm_pipeline") and "at most one stage per layer" in msg
