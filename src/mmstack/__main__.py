"""`python -m mmstack` runs the CLI (same as the `mmstack` script), with its exit code."""

from mmstack.cli import main

raise SystemExit(main())
