"""Tests of the proxima-agent Helm chart, rendered by the real helm binary."""
