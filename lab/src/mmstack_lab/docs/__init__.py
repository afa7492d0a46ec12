"""The numbers and pictures in docs/, rendered from lab/results/."""
