"""Serverless functions on the continuum: Gaia's dynamic CPU/GPU runtime and request arrivals."""
