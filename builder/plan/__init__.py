"""The pure plan: from a loaded spec to content keys (keys), Dockerfiles (render), interop files
(bake), registry names (layout) and a rendered tree on disk (outdir). Nothing here talks to a Docker
engine or a registry; builder.ship does."""
