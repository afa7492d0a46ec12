"""`python -m mmstack` runs the CLI (same as the `mmstack` script)."""

from mmstack.cli import main

main()
