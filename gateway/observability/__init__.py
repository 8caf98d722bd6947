"""Prometheus metrics and log setup."""
