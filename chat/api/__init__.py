"""The OpenAI-compatible REST API for integrations: `/v1/...` (docs/api.md)."""
