"""How long a build takes and how big its package is: nvcc per arch set, ccache, compile units and their schedule, .conda sizes."""
