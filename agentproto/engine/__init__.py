"""The engine: one session (session.py: turns, queues, requests, ordering, flow control), its
turns and the commands it runs (session_turns.py), its open requests (session_requests.py),
one turn's bookkeeping (turns.py), flow control and stall (flow.py), a row per ended turn for
``inspect`` (observations.py), every session of one sidecar with the one dispatcher every
framing calls (runtime.py), and the runtime's one-shot commands, which never import it
(oneshots.py: discover, probe, plan_usage, plan_usage_all, generate).

May import: core/, loopio/, tools/, drivers/ and engine/ itself.
"""
