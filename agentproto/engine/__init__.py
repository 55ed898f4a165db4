"""The engine: one session (session.py: turns, queues, requests, ordering, flow control), its
open requests (session_requests.py), one turn's bookkeeping (turns.py), flow control and
stall (flow.py), a row per ended turn for ``inspect`` (observations.py), and every session of
one sidecar with the one dispatcher every framing calls (runtime.py).

May import: core/, loopio/, tools/, drivers/ and engine/ itself.
"""
