"""Fixtures this folder's tests share: the example's repository, a store path and the
training image on the real engine."""

from tests.helpers.fixtures import image, repo, store

__all__ = ["image", "repo", "store"]
