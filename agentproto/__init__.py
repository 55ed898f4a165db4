"""agentproto: one line-delimited JSON contract between programs and coding agents."""

__version__ = "0.1.0"

#: The protocol number of the frames on the wire (anyagent's "protocol 1").
PROTOCOL = 1

#: The contract name that the ops framings advertise; see the README's versioning rule.
CONTRACT = "agentproto/1"
