"""The typed config."""
