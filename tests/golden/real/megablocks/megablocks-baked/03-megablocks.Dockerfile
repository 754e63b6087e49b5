# imgbuild layer megablocks (kind project). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY sources/source /mount/megablocks
ENV PYTHONPATH="/mount/megablocks${PYTHONPATH:+:${PYTHONPATH}}"

LABEL io.imgbuild.layer="megablocks" \
      io.imgbuild.kind="project" \
      io.imgbuild.source.source="https://github.com/databricks/megablocks.git@11ae0032d1ddc60c7efc683a0aaa9680340ef9d9"