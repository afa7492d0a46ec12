"""`python -m mmstack` runs the CLI (same as the `mmstack` script)."""

from .cli import main

main()
