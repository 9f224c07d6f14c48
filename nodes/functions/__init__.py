"""Serverless function analysis: execution-mode identification at deploy time."""
