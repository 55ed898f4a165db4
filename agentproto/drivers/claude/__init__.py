"""Claude Code: the session (driver.py), its stream-json messages as events (stream.py), the
control protocol (control.py), the pure mapping (mapping.py).

May import what drivers/ may; no other family.
"""
