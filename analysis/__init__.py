"""Rendering over tracked metrics: the paper's tables and figures (never imported by the library)."""
