"""Console infrastructure: database, settings, secrets, signatures, clock, logs."""
