"""Codex app-server: the session (driver.py), its notifications and requests (items.py), the
pure mapping (mapping.py), the plan usage read without a session (usage.py).

May import what drivers/ may; no other family.
"""
