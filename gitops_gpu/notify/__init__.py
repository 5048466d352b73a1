"""Outgoing notifications: one message per commit per stage transition, to a webhook."""

SCHEMA = "gitops-gpu.notification/v1"  # the plain JSON format (docs/notifications.md)
FORMATS = ("slack", "json")
