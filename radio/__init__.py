"""radio package."""
