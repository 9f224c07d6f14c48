"""bare_e2e."""
