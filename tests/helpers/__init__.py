"""Helpers the tests of several folders share: repositories, fixtures, command lines."""
