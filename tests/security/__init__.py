"""Attacks on the engine and the store, each reproduced and shown to fail safely."""
