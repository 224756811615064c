"""FATHOM: async harness-RL for Recursive Language Models over long documents."""

__version__ = "0.1.0"
