"""Fault-injection suite (issue 6): real dev servers, real worker processes, real kills."""
