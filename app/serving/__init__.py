"""What gunicorn needs beyond its settings: the worker class, the log redaction, the start-up checks and the
process tweaks. gunicorn.conf.py wires these in; nothing in the app imports this package.

- ``config``: where to listen, how many processes and threads, and how long a client may take to send a request
  (from the environment; the app's own settings stay in app/settings.py).
- ``checks``, ``hooks``, ``process``: gunicorn's server hooks, the start-up refusals and warnings, and what the
  master sets before it forks (BLAS threads, the allocator).
- ``logs``: gunicorn's own log lines with key-shaped strings redacted.
- ``framing``, ``answers``, ``reading``, ``worker``: the gthread worker that reads request heads (and, when
  threads are scarce, bodies) in its event loop, bounds how long a client may take, and answers what it refuses
  in the error envelope.
"""
