"""fleet_policy: hypothesis properties and the worked examples of docs/fleet-policy.md."""
