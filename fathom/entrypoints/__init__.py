"""Thin entry points: parse config first, import heavy modules inside the command."""
