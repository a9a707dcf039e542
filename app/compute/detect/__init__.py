"""The anomaly detectors and change-point finder, run in worker processes only."""

from app.compute.detect.native import compiled_dir

# The detector's compiled modules, where a build of the current sources exists, are found before the sources
# (app.compute.detect.native says why and when).
_compiled = compiled_dir()
if _compiled is not None:
    __path__.insert(0, str(_compiled))
