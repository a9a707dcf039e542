"""What every HTTP endpoint shares: the request pipeline, authentication, body reading, JSON parsing,
validation envelopes, shared fields and the mapping of worker-pool failures to responses."""
