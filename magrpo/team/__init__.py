"""A trained team."""
