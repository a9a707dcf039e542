"""Time and frequency: timestamp forms, instants, the per-frequency table. No numeric imports at module level."""
