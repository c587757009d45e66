"""The Proxima Console: enrollment, identities, heartbeats, inventory and commands."""
