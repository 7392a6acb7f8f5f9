"""Example agents the worker registers by default."""
