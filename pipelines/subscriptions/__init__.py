"""Webhook subscriptions: the ops tables that keep them, secret storage, and the delivery loop."""
