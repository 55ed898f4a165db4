"""Antigravity ``agy``: the session (driver.py), its plugin directory (plugin.py), the pure
mapping (mapping.py).

May import what drivers/ may; no other family.
"""
