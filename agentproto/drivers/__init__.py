"""The drivers, one adapter per agent over the seam: the seam itself (base.py: Driver, Host,
Launch, the line guard, LineDriver), the known agents and discovery (catalog.py, which
imports a family's driver on first use; the user's agents.json: agents_file.py), typed reads
of what an agent wrote (fields.py), the scripted mock (mock.py), and one subfolder per agent
family: claude/, codex/, acp/, agy/ (each: driver.py, the session; mapping.py, pure
functions; types.py, the agent's messages as TypedDicts for mypy only, imported under
TYPE_CHECKING alone, one statement a message in TypedDict's functional form; and its
helpers).

May import: core/, loopio/, tools/ and drivers/ itself.
"""
