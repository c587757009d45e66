"""Prefect flows: the control plane. They reach the Console over HTTP only."""
