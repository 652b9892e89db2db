"""Models: the engine-independent ModelSpec, its family readers, and where configs come from."""
