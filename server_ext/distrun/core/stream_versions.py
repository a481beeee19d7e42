"""The versions of the log websocket (`/distrun/jobs/{id}/logs/stream`), named as the
Sec-WebSocket-Protocol a client offers; the server serves every one in SERVED_PROTOCOLS
(server/log_stream.py), and a client offers the ones it reads newest first: a client that shows
lines only offers STREAM_PROTOCOLS (client/server_client.py), one that also shows usage offers
version 3 before them (the extension's common/stream.ts)."""

# {"type": "lines", "lines": [[replica, seq, time_s, text], ...]}: a row per line. The first
# release's shape, and what a client that offers no version gets.
V1_LINES = "distrun.logs.v1"
# {"type": "runs", "runs": [{"replica", "seq", "times_ms", "texts"}, ...]}: columns.
V2_RUNS = "distrun.logs.v2"
# Version 2, and {"type": "usage", "samples": [UsageSample, ...]} as the replicas' usage is
# sampled (core/usage.py), resumed from the `usage_since` query parameter.
V3_USAGE = "distrun.logs.v3"
# What a client that reads lines only offers, newest first.
STREAM_PROTOCOLS = (V2_RUNS, V1_LINES)
# Every version the server serves, newest first.
SERVED_PROTOCOLS = (V3_USAGE, *STREAM_PROTOCOLS)
