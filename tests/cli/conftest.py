"""Fixtures this folder's tests share: the noisy pair within its noise."""

from tests.helpers.noisy import within

__all__ = ["within"]
