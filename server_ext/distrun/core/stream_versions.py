"""The versions of the log websocket (`/distrun/jobs/{id}/logs/stream`), named as the
Sec-WebSocket-Protocol a client offers; the server serves every one listed here
(server/log_stream.py), and a client offers them newest first (client/server_client.py, the
extension's common/stream.ts)."""

# {"type": "lines", "lines": [[replica, seq, time_s, text], ...]}: a row per line. The first
# release's shape, and what a client that offers no version gets.
V1_LINES = "distrun.logs.v1"
# {"type": "runs", "runs": [{"replica", "seq", "times_ms", "texts"}, ...]}: columns.
V2_RUNS = "distrun.logs.v2"
# Newest first.
STREAM_PROTOCOLS = (V2_RUNS, V1_LINES)
