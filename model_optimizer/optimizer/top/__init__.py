"""`mopt top`: a live terminal view of a server's /metrics (ours or vLLM's: the names are the same)."""
