"""Frontends, one module per framing or transport: the base of those on a byte stream
(base.py); protocol 1 over a byte stream (serve.py) and on a Unix socket (unix.py); the ops
framing (ops_framing.py, its sessions' mailboxes ops_hub.py) on stdio (ops_stdio.py: the
``agent`` loop and ``--single-shot``) and over HTTP (ops_http.py); JSON-RPC
(jsonrpc_server.py); MCP on stdio (mcp_stdio.py); the ``inspect`` op (inspect_op.py) and the
control socket (control.py).

May import: every layer below (core/, loopio/, tools/, drivers/, engine/) and frontends/ itself.
"""
