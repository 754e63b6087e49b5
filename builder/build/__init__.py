"""The build path, in the order data flows: bases (digests) -> plan (keys) -> render (Dockerfiles) ->
sources (git pins) -> engine (BuildKit) -> checks (in-image) -> manifest -> publish (release tags);
pipeline runs it, registry and layout are where it lands, lock measures bases."""
