"""MAGRPO: multi-agent group relative policy optimization for teams of cooperating LLMs."""

__version__ = "0.1.0"
