"""Operator library (being written)."""
