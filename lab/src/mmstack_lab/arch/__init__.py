"""Which GPUs a package runs on: third-party wheels' fatbins (docs/gpus.md) and what ptxas compiles each PTX for."""
