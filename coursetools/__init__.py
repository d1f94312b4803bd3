"""Helpers the notebooks use that are not exercises (pictures, views)."""
