"""Experiment spec: YAML -> frozen pydantic models, validated once, errors with lines."""

from testbed.spec.loader import SpecError, load_spec, parse_spec
from testbed.spec.models import Experiment

__all__ = ["Experiment", "SpecError", "load_spec", "parse_spec"]
