"""Timing, host facts, compressed logs and path scrubbing shared by the lab's tools."""
