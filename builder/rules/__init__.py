"""The judges: facts by origin, preflight rules (IB0xx), lint (IB1xx), and review, which assembles them
for check, lint and the build gate. What they read (the catalog, the shell and Dockerfile readers) is
builder.core, beneath loading and planning."""
