"""Widgets of the terminal app: plots, badges and the paged runs table."""
