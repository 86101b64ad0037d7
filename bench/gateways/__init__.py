"""Dropbox directories against the file system's floor, and node-to-node forwarding over
HTTP (sluice.gateways.http)."""
