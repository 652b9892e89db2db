"""Renderers: text tables and JSON. They format; they never compute."""
