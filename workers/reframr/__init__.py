"""Reframr (OkeyMeta's recurrent, CPU-only model) as a Sluicegate worker; see `workers.reframr.app`."""

from workers.reframr.app import create_app

__all__ = ["create_app"]
