"""Alerts: which events a run of judged points raises (incidents.py), the delivery queue they wait in (queue.py),
the background sender that takes them from it (sender.py), and their two destinations: a signed webhook POST
(webhooks.py) and Alertmanager (alertmanager.py)."""
