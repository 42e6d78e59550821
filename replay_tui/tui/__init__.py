"""The terminal app: the app, its messages, screens, widgets and the queries they read."""
