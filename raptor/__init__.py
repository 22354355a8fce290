"""Raptor."""
