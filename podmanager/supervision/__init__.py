"""Supervising a run: health checks, classifying what went wrong, the recovery policy, the
supervisor loop and its ledger."""
