"""ACP agents: the session (driver.py), the open session's turns (turns.py), terminals
(services.py), ``fs/*`` confined to the session's directory (fs.py), the pure mapping
(mapping.py).

May import what drivers/ may; no other family.
"""
