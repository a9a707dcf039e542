"""Foreign APIs served on the service's own front doors: each package translates a shape in and out, nothing else."""
