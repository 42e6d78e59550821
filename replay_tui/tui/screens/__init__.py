"""Screens of the terminal app, one module (and one .tcss file) per screen."""
