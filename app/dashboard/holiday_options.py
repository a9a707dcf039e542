"""The playground's holiday picker: the countries and subdivisions of the holidays package, as the service takes
them (docs/covariates.md). Read from the package once per process, so the list is the package's, never a copy."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def holiday_countries() -> list[dict[str, Any]]:
    """Each country by its two-letter code, with a readable name and its subdivision codes, sorted by name."""
    from holidays import list_supported_countries
    from holidays.registry import COUNTRIES

    subdivisions = list_supported_countries()
    found = [
        {"code": entry[1], "name": module.replace("_", " ").title(), "subdivisions": list(subdivisions[entry[1]])}
        for module, entry in COUNTRIES.items()
        if entry[1] in subdivisions
    ]
    return sorted(found, key=lambda country: country["name"])
