"""The record format and the store: no Textual, no Docker, no torch."""
