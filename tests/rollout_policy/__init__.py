"""rollout_policy: hypothesis properties and the worked examples of docs/rollout-policy.md."""
