"""Monitors: stored metric streams judged point by point as they arrive, forecast ahead, and alerted on."""
