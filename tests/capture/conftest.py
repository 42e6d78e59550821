"""Fixtures this folder's tests share: the example's repository and a store path."""

from tests.helpers.fixtures import repo, store

__all__ = ["repo", "store"]
