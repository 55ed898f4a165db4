"""The app's own tools: their declarations and hooks (apptools.py), the token-guarded
loopback listener that serves them to each session's agent over MCP (listener.py), the MCP
client on the loop (mcp_client.py) and the ``mcp-bridge`` command's relay (mcp_bridge.py).

May import: core/, loopio/ and tools/ itself.
"""
