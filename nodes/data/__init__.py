"""Datasets and partitioners, registered by name (no heavy imports here)."""
