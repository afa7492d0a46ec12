"""pytest's glue (not part of the mmstack package): the CLI runner, fixture loaders, session fixtures,
the CI steps runner. What builds stand-in packages or channels is the lab's (mmstack_lab.standin;
tests/test_layout.py holds that line)."""
