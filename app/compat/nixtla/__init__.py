"""Routes for Nixtla's ``nixtla`` client (NixtlaClient 0.9), answered by this service's own models."""
