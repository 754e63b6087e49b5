"""Analysis before building: the sourced catalog, facts by origin, preflight rules (IB0xx), lint
(IB1xx), and review, which assembles them for check, lint and the build gate."""
