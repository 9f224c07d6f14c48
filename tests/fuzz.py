"""Hypothesis strategies shared by the fuzz tests: generated and mutated experiment files.

Mutations start from the real ``experiments/*.yaml``: text edits (characters inserted,
deleted, replaced), structural edits (a value replaced by any YAML value, a key dropped
or added, a list emptied) and raw bytes. ``examples(share, size)`` splits the full run
(:data:`FULL_EXAMPLES` inputs, ``make test-e2e``) or the sample (``make test``) between
the fuzz targets.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
SPECS = {p.name: p.read_text() for p in sorted((ROOT / "experiments").glob("*.yaml"))}
FULL_EXAMPLES = 10_000  # over all fuzz targets together (issue 14)
SAMPLE_EXAMPLES = int(os.environ.get("TESTBED_FUZZ_SAMPLE", "400"))
SIZES = ("sample", "full")


def examples(share: float, size: str) -> int:
    """Examples for a target with ``share`` of the inputs, in a ``sample`` or ``full`` run."""
    return max(1, round(share * (FULL_EXAMPLES if size == "full" else SAMPLE_EXAMPLES)))


def fuzz_settings(share: float, size: str) -> settings:
    return settings(
        max_examples=examples(share, size),
        deadline=None,
        derandomize=size == "sample",  # the sample is the same on every run of make test
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["1e309", ".inf", "-.inf", ".nan", "2020-13-45", "0x1F", "~", "yes"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys/indices) in a parsed document."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def dotted_keys(name: str = "quickstart.yaml") -> list[str]:
    """The dotted paths of a real experiment (what ``--set`` overrides)."""
    return [".".join(map(str, p)) for p in _paths(yaml.safe_load(SPECS[name])) if p]


@st.composite
def structural(draw: st.DrawFn) -> str:
    """A real experiment with one value replaced, a key removed or an unknown key added."""
    doc = yaml.safe_load(SPECS[draw(st.sampled_from(sorted(SPECS)))])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@st.composite
def text_edits(draw: st.DrawFn) -> str:
    """A real experiment with a few characters inserted, deleted or replaced."""
    text = SPECS[draw(st.sampled_from(sorted(SPECS)))]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 8)))
        text = text[:i] + draw(st.text(max_size=6)) + text[j:]
    return text


YAML_TRICKS = [
    "a: &a [1, 2]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c]\n",
    "name: x\nseed: &s [*s]\n",
    "[" * 500 + "]" * 500,
    "name: x\nname: y\n",
    "- a\n- b\n",
    "",
    "name: x\ndate: 2020-13-45\n",
    "name: x\nseed: " + "9" * 5000 + "\n",
    "\x00\x01",
    "--- a\n--- b\n",
    "? [a, b]\n: 1\n",
    "name: !!binary '!!!'\n",
]


def spec_texts() -> st.SearchStrategy[str]:
    """Mutated real experiments, YAML corner cases and random text."""
    return st.one_of(
        structural(),
        text_edits(),
        st.sampled_from(YAML_TRICKS),
        st.text(max_size=200),
    )


def spec_bytes() -> st.SearchStrategy[bytes]:
    """File contents: encoded spec texts, random bytes, or valid text with bad bytes."""
    return st.one_of(
        spec_texts().map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.binary(max_size=300),
        st.tuples(text_edits(), st.binary(min_size=1, max_size=8)).map(
            lambda tb: tb[0].encode("utf-8", "surrogatepass") + tb[1]
        ),
    )


def set_items() -> st.SearchStrategy[list[str]]:
    """``--set`` items: real or random keys, random values, or malformed items."""
    key = st.one_of(st.sampled_from(dotted_keys()), st.text(max_size=20))
    value = st.one_of(values.map(lambda v: yaml.safe_dump(v).strip()), st.text(max_size=20))
    item = st.one_of(st.tuples(key, value).map(lambda kv: f"{kv[0]}={kv[1]}"), st.text(max_size=20))
    return st.lists(item, min_size=1, max_size=4)
