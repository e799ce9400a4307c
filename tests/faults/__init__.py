"""Fault injection: kills, concurrent agents, hostile files."""
