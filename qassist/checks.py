"""Configuration problems are reported here, with stable ids, instead of at first request."""
