"""The Console's NATS side: user JWTs, the embedded server, authorization advisories."""
