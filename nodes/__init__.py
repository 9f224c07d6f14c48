"""nodes package."""
