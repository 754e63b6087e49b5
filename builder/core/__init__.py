"""Foundations: what loading and planning stand on, importing nothing of imgbuild above them. The
compatibility catalog (+ data/catalog.yaml), the readers of YAML with lines (yamlsrc), of RUN shell text
(shell) and of Dockerfiles (dockerfile), the platforms imgbuild builds, and the lock file's model, reader
and path (lockfile). builder.errors, builder.textsafe and builder.redact sit at this level too."""
