"""The loop and the I/O on it: one blocking ``selectors`` loop (loop.py) runs every pipe,
socket, timer, child and signal; every pipe and socket is read and written through
``loop.io`` (so a fault-injecting reader or writer can replace it in tests).

What lives here: a child's whole process tree (proctree.py), the process's file descriptors
(descriptors.py: the limit and the reserve), the loop (loop.py), the rules
of every file agentproto creates (private.py), the one recorder (record.py), the one reader
and the one writer (streams.py), sockets on the loop (sockets.py: Acceptor, Accepted,
Exchange), the process lifetime every stdio frontend shares (lifetime.py), HTTP/1.1
connections handing requests to a handler (httpserver.py), the agent transport seam
(transport.py) and its two implementations: a child process (process_transport.py) and a
recorded agent played back (replay_transport.py).

Named ``loopio``, not ``io``: inside the package ``from agentproto import io`` or
``from . import io`` would read as (and bind over) the standard library's io.

May import: core/ and loopio/ itself.
"""
