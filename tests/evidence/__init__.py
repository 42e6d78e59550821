"""The evidence bundle's human report: its plots, in unit tests and in a real browser."""
