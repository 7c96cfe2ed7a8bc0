"""Shared infrastructure of the scripts in cleanrl/ (see each module)."""
