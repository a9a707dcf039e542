"""Background work on Huey: the engine built from settings, the tasks each package registers, the worker command."""
