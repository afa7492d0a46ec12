"""Command bodies behind cli.py: each takes keyword arguments, prints, returns an exit code."""
