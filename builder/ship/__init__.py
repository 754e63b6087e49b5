"""Shipping images: everything that talks to a Docker engine or a registry, in the order data flows:
bases (digests) -> sources (git pins) -> engine (BuildKit) -> checks (in-image) -> manifest ->
publish (release tags). pipeline runs it over a plan from builder.plan; schedule runs independent
layers at once; lock measures bases; registry and oci are the registry client."""
