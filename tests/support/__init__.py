"""TEST SUPPORT ONLY: helpers for the slow end-to-end tests (not part of the mmstack package)."""
