"""The account dashboard (server-rendered pages under /dashboard) and its session identity for the API."""
