"""Stand-in for the compiled ext (loads fine)."""
