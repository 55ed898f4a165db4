"""Commands that are more than a frontend: ``list`` (listing.py), ``chat`` and its screen
(chat.py, chat_screen.py), ``replay`` and ``--replay`` (replay.py, its checker replay_checker.py
and its runtime replay_runtime.py), ``completion`` (completion.py), and the usage errors that
name the nearest valid word (usage.py).

May import: every layer below and commands/ itself. Only the top level (cli.py; cli_args.py
for a usage error) imports it.
"""
