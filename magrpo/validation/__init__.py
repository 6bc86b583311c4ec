"""Validation."""
