"""Hyperion: pipelined LLM inference over the fleet (partitioning, scheduling, the run)."""
