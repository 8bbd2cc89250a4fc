"""The `local` backend: `backend` (`LocalBackend`, a job in the flow's process) and `ray` (the
process's own Ray: connecting, and keeping a signal's meaning across a wait inside Ray)."""
