"""Operation tests (issue 11): metrics, health, request IDs and logs, API keys, deployment."""
