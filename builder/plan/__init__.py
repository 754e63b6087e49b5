"""The pure plan: from a loaded spec to content keys (keys), Dockerfiles (render), interop files
(bake), registry names (layout), a rendered tree on disk (outdir) and the recorded base facts
(lockfile). Nothing here talks to a Docker engine or a registry; builder.ship does."""
